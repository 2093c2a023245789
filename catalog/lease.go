package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
)

// ErrNoFreeSlot reports that every application ID slot is held by a live
// process (it is idgen.ErrNoFreeSlot). New rows then take their keys from
// the database's DEFAULT next_id().
var ErrNoFreeSlot = idgen.ErrNoFreeSlot

// Lease defaults.
const (
	DefaultLeaseTTL = 10 * time.Second
)

// LeaserConfig tunes a Leaser. The zero value is ready to use.
type LeaserConfig struct {
	// Holder names this process in the catalog's slot_leases.holder. Empty
	// means "hostname:pid". A random token is always appended, so two
	// leasers in one process are different holders.
	Holder string
	// TTL is how long an acquisition or renewal holds the slot, on the
	// catalog's clock. Zero means DefaultLeaseTTL.
	TTL time.Duration
	// Margin is subtracted from the TTL to get the local deadline, to cover
	// clock-rate differences and scheduling delays. Zero means TTL/5.
	Margin time.Duration
	// MaxBorrow must be at least the generators' idgen.Config.MaxBorrow:
	// the high-water mark recorded at each renewal is the send time + TTL +
	// MaxBorrow. Zero means idgen.DefaultMaxBorrow.
	MaxBorrow time.Duration
	// Clock measures local deadlines. Nil means the system clock (with its
	// monotonic reading, so wall clock steps do not move deadlines).
	Clock idgen.Clock
}

// Leaser leases ID slots from the catalog's shardkit.slot_leases table. It
// implements idgen.Leaser (DESIGN invariant 1):
//
//   - slots are 1..2^slot_bits-1; slot 0 is the database's next_id();
//   - a lease lasts TTL on the catalog's clock and is renewed by its holder;
//   - the holder's local deadline is the time the request was sent + TTL -
//     Margin on its monotonic clock, so it stops issuing before the catalog
//     lets anyone else take the slot;
//   - each slot records a time high-water mark (unix ms): on acquisition
//     and renewal an upper bound of any ID the holder may issue before the
//     lease ends, on release the exact mark; a new holder issues IDs only
//     after its clock is past the previous mark (idgen.Lease.MinMs);
//   - Acquire takes the free or expired slot with the oldest mark.
type Leaser struct {
	pool     *pgxpool.Pool
	cfg      LeaserConfig
	maxSlot  int
	holder   string
	ttlSecs  float64
	deadline time.Duration // TTL - Margin
	bound    int64         // ms: TTL + MaxBorrow
}

var _ idgen.Leaser = (*Leaser)(nil)

const (
	// ensureSlotsSQL creates the slot rows 1..$1 on first use.
	ensureSlotsSQL = `INSERT INTO shardkit.slot_leases (slot) SELECT generate_series(1, $1::integer) ON CONFLICT (slot) DO NOTHING`

	// acquireSlotSQL takes the free or expired slot with the oldest mark
	// and returns it with the previous holder's mark.
	acquireSlotSQL = `WITH pick AS (
    SELECT slot, hwm_ms FROM shardkit.slot_leases
    WHERE slot BETWEEN 1 AND $1 AND (holder IS NULL OR expires_at IS NULL OR expires_at < clock_timestamp())
    ORDER BY hwm_ms, slot
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE shardkit.slot_leases AS l
SET holder = $2, leased_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => $3),
    hwm_ms = GREATEST(l.hwm_ms, $4)
FROM pick WHERE l.slot = pick.slot
RETURNING l.slot, pick.hwm_ms`

	// renewSlotSQL extends a lease its holder still has.
	renewSlotSQL = `UPDATE shardkit.slot_leases
SET expires_at = clock_timestamp() + make_interval(secs => $3), hwm_ms = GREATEST(hwm_ms, $4)
WHERE slot = $1 AND holder = $2`

	// releaseSlotSQL frees a slot and records its holder's exact mark.
	releaseSlotSQL = `UPDATE shardkit.slot_leases
SET holder = NULL, expires_at = NULL, hwm_ms = $3
WHERE slot = $1 AND holder = $2`
)

// NewLeaser returns a Leaser on the catalog. It reads the slot bits from
// the catalog's configuration.
func NewLeaser(ctx context.Context, cat *Catalog, cfg LeaserConfig) (*Leaser, error) {
	c, err := cat.Config(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.TTL / 5
	}
	if cfg.Margin >= cfg.TTL {
		return nil, fmt.Errorf("shardkit: lease margin %v must be shorter than the TTL %v", cfg.Margin, cfg.TTL)
	}
	if cfg.MaxBorrow <= 0 {
		cfg.MaxBorrow = idgen.DefaultMaxBorrow
	}
	if cfg.Clock == nil {
		cfg.Clock = idgen.SystemClock()
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	return &Leaser{
		pool:     cat.pool,
		cfg:      cfg,
		maxSlot:  c.Layout.Slots() - 1,
		holder:   cfg.Holder + ":" + hex.EncodeToString(tok[:]),
		ttlSecs:  cfg.TTL.Seconds(),
		deadline: cfg.TTL - cfg.Margin,
		bound:    (cfg.TTL + cfg.MaxBorrow).Milliseconds(),
	}, nil
}

// Holder returns the name this leaser records in the catalog.
func (s *Leaser) Holder() string { return s.holder }

// Acquire is part of the idgen.Leaser interface. With every slot held it
// returns an error wrapping ErrNoFreeSlot.
func (s *Leaser) Acquire(ctx context.Context) (*idgen.Lease, error) {
	if s.maxSlot < 1 {
		return nil, fmt.Errorf("shardkit: %w: the layout has no slot bits, so only the database's next_id() issues IDs", ErrNoFreeSlot)
	}
	if _, err := s.pool.Exec(ctx, ensureSlotsSQL, s.maxSlot); err != nil {
		return nil, s.catalogError("lease an ID slot", err)
	}
	sent := s.cfg.Clock.Now()
	var slot int
	var prev int64
	err := s.pool.QueryRow(ctx, acquireSlotSQL, s.maxSlot, s.holder, s.ttlSecs, sent.UnixMilli()+s.bound).Scan(&slot, &prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("shardkit: %w: all %d ID slots are held by live processes; "+
			"new rows take their keys from the database's next_id() until a slot frees up (or widen slot_bits)", ErrNoFreeSlot, s.maxSlot)
	}
	if err != nil {
		return nil, s.catalogError("lease an ID slot", err)
	}
	return idgen.NewLease(slot, prev, s.holder, s.cfg.TTL, sent.Add(s.deadline), sent.UnixMilli()+s.bound), nil
}

// Renew is part of the idgen.Leaser interface. A slot taken by another
// holder returns an error wrapping idgen.ErrLeaseLost.
func (s *Leaser) Renew(ctx context.Context, l *idgen.Lease) error {
	sent := s.cfg.Clock.Now()
	bound := sent.UnixMilli() + s.bound
	tag, err := s.pool.Exec(ctx, renewSlotSQL, l.Slot, l.Holder, s.ttlSecs, bound)
	if err != nil {
		return s.catalogError(fmt.Sprintf("renew ID slot %d", l.Slot), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("shardkit: %w: slot %d is no longer held by %s", idgen.ErrLeaseLost, l.Slot, l.Holder)
	}
	l.Extend(sent.Add(s.deadline), bound)
	return nil
}

// Release is part of the idgen.Leaser interface. It records l.HighWater()
// as the slot's exact mark, so call it only after the generator stopped
// issuing (idgen.Generator.Close does).
func (s *Leaser) Release(ctx context.Context, l *idgen.Lease) error {
	tag, err := s.pool.Exec(ctx, releaseSlotSQL, l.Slot, l.Holder, max(l.HighWater(), l.MinMs))
	if err != nil {
		return s.catalogError(fmt.Sprintf("release ID slot %d", l.Slot), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("shardkit: %w: slot %d is no longer held by %s", idgen.ErrLeaseLost, l.Slot, l.Holder)
	}
	l.Revoke()
	return nil
}

func (s *Leaser) catalogError(what string, err error) error {
	if isUndefinedTable(err) {
		return fmt.Errorf("shardkit: %s: %w", what, ErrNoCatalog)
	}
	return fmt.Errorf("shardkit: %s: %w", what, err)
}

// StartGenerator leases an ID slot from the catalog and starts a generator
// in the catalog's layout (idgen.Start). With no free slot the error wraps
// ErrNoFreeSlot. The cleanup stops the generator and releases the slot.
func StartGenerator(ctx context.Context, cat *Catalog, lc LeaserConfig, gc idgen.Config) (*idgen.Generator, func(), error) {
	c, err := cat.Config(ctx)
	if err != nil {
		return nil, nil, err
	}
	if gc.Clock == nil {
		gc.Clock = lc.Clock
	}
	if gc.MaxBorrow > 0 && lc.MaxBorrow < gc.MaxBorrow {
		lc.MaxBorrow = gc.MaxBorrow
	}
	leaser, err := NewLeaser(ctx, cat, lc)
	if err != nil {
		return nil, nil, err
	}
	return idgen.Start(ctx, c.Layout, leaser, gc)
}
