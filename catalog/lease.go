package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
)

// ErrNoFreeSlot reports that every application ID slot is held by a live
// process (it is idgen.ErrNoFreeSlot). New rows then take their keys from the
// database's DEFAULT next_id(). For more processes with IDs made in Go, lease
// parts of slots (LeaserConfig.LeaseBits).
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

	// LeaseBits is how many low sequence bits each lease of the generator's
	// own slot fixes (idgen.Lease.Bits), from the layout's slot_bits to its
	// seq_bits. Zero means slot_bits: whole slots, 2^slot_bits-1 processes
	// (63 with Instagram's layout) of 2^(seq_bits-slot_bits) IDs per ms per
	// shard each (16). Each bit more doubles the processes and halves their
	// rate: seq_bits (10) gives 1008 processes of one ID per ms per shard
	// (1000 IDs/s on each of the 2000 shards), bursts borrowing up to
	// MaxBorrow ahead. Processes with different LeaseBits may share a
	// catalog. Bulk work's extra slots are whole slots when any is free.
	LeaseBits uint8
}

// Leaser leases ID slots from the catalog's shardkit.slot_leases table. It
// implements idgen.Leaser (DESIGN invariant 1):
//
//   - a lease of b bits fixes the low b bits of its IDs' sequences: a
//     value whose low slot_bits bits are not 0 (those are the database's
//     next_id()); b = slot_bits is a whole slot, a wider b a part of one;
//   - two leases overlap when the narrower one's bits are the low bits of
//     the other's; a lease is granted only while no overlapping lease is
//     live, and expired overlapping holders are cleared in the same
//     transaction, so their renewals fail with idgen.ErrLeaseLost;
//   - a lease lasts TTL on the catalog's clock and is renewed by its holder;
//   - the holder's local deadline is the time the request was sent + TTL -
//     Margin on its monotonic clock, so it stops issuing before the catalog
//     lets anyone else take the slot;
//   - each lease row records a time high-water mark (unix ms): on acquisition
//     and renewal an upper bound of any ID the holder may issue before the
//     lease ends, on release the exact mark; a new holder issues IDs only
//     after its clock is past the newest mark of every overlapping row
//     (idgen.Lease.MinMs);
//   - acquisitions are serialised by a transaction-scoped advisory lock
//     (renewals and releases are not): one at a time, each one pipeline
//     of statements, so the lock is held for the catalog's work alone;
//   - whole slots go to the free one with the oldest mark; parts of slots
//     fill the highest slots first, leaving whole slots free for bulk work;
//   - the catalog records the history (epoch: system identifier and
//     timeline) its last grant was made in; a grant in another history (a
//     failover that lost commits, a restore) may find free a slot whose
//     lost grant still has a live holder, so no lease is granted for the
//     longest TTL any grant used (a *HeldBackError), by when those holders,
//     whose renewals fail, have stopped, and every later lease's floor is
//     past the longest bound (TTL + MaxBorrow) from the change.
type Leaser struct {
	pool     *pgxpool.Pool
	cfg      LeaserConfig
	maxSlot  int   // 2^slot_bits - 1: also the mask of a whole slot
	slotBits uint8 // the layout's
	bits     uint8 // width of the generator's own leases
	units    int   // leases of that width
	holder   string
	ttlSecs  float64
	deadline time.Duration // TTL - Margin
	bound    int64         // ms: TTL + MaxBorrow

	mu      sync.Mutex
	ensured map[uint8]bool // lease widths whose rows exist
	epochs  bool           // the catalog records its history (version 14)
}

var _ idgen.Leaser = (*Leaser)(nil)

// picked is the lease an acquisition's pick chose (0: none), for the
// statements after it in the same transaction.
const picked = `current_setting('shardkit.lease_pick')::integer`

// overlaps is the SQL condition "row o overlaps the lease (bits $1, slot
// picked)" given the whole-slot mask $2. Its first term lets Postgres
// join on the whole slot.
const overlaps = `(o.slot & $2) = (` + picked + ` & $2)
    AND (o.slot & ((1 << LEAST(o.bits, $1::integer)) - 1)) = (` + picked + ` & ((1 << LEAST(o.bits, $1::integer)) - 1))`

// live is the SQL condition "row o is held and not expired", expiry read
// at the statement's start: a lease that expires during the statement
// still counts as held.
const live = `(o.holder IS NOT NULL AND o.expires_at IS NOT NULL AND o.expires_at >= statement_timestamp())`

// liveU is live for row u.
const liveU = `(u.holder IS NOT NULL AND u.expires_at IS NOT NULL AND u.expires_at >= statement_timestamp())`

// pickQuery finds a free lease of $1 bits that no live lease overlaps:
// $3 packs parts of slots into the highest slots; whole slots go oldest
// mark first.
const pickQuery = `(SELECT u.slot FROM shardkit.slot_leases u
WHERE u.bits = $1 AND NOT ` + liveU + `
    AND NOT EXISTS (SELECT 1 FROM shardkit.slot_leases o
        WHERE ` + live + ` AND (o.slot & $2) = (u.slot & $2)
            AND (o.slot & ((1 << LEAST(o.bits, u.bits)) - 1)) = (u.slot & ((1 << LEAST(o.bits, u.bits)) - 1)))
ORDER BY CASE WHEN $3 THEN u.slot & $2 ELSE 0 END DESC, u.hwm_ms, u.slot
LIMIT 1)`

// heldBack is the SQL condition "the catalog holds grants back": its
// history changed less than the longest lease TTL ago.
const heldBack = `EXISTS (SELECT 1 FROM shardkit.lease_epoch WHERE hold_until > statement_timestamp())`

const (
	// lockSlotsSQL serialises acquisitions, so that two cannot both find
	// the same overlapping leases free.
	lockSlotsSQL = `SELECT pg_advisory_xact_lock(hashtext('shardkit.slot_leases'))`

	// ensureSlotsSQL creates the rows of the $3 leases of $1 bits on first
	// use ($2: the whole-slot mask).
	ensureSlotsSQL = `INSERT INTO shardkit.slot_leases (bits, slot)
SELECT $1, x FROM generate_series(1, (1 << $1::integer) - 1) AS x
WHERE x & $2 <> 0 AND (SELECT count(*) FROM shardkit.slot_leases WHERE bits = $1) < $3
ON CONFLICT (bits, slot) DO NOTHING`

	// pickSlotSQL picks a free lease of $1 bits (pickQuery), records it
	// as picked for the rest of the transaction and returns it (0: none
	// is free).
	pickSlotSQL = `SELECT set_config('shardkit.lease_pick', COALESCE(` + pickQuery + `, 0)::text, true)::integer`

	// pickSlotHeldSQL is pickSlotSQL on a catalog that records its
	// history (version 14): it picks nothing while the grants are held
	// back after a change of history (epochSQL, earlier in the same
	// transaction, starts the hold).
	pickSlotHeldSQL = `SELECT set_config('shardkit.lease_pick', CASE WHEN ` + heldBack + ` THEN 0
    ELSE COALESCE(` + pickQuery + `, 0) END::text, true)::integer`

	// clearExpiredSQL frees the expired leases overlapping (bits $1, slot
	// picked): their holders' renewals now fail, and a renewal that got in
	// first keeps its row (the take below then sees it live).
	clearExpiredSQL = `UPDATE shardkit.slot_leases o SET holder = NULL, expires_at = NULL
WHERE ` + overlaps + ` AND o.holder IS NOT NULL AND NOT ` + live

	// takeSlotSQL leases (bits $1, slot picked) to $3 if no overlapping
	// lease is live, returning the floor: the newest mark of every
	// overlapping row.
	takeSlotSQL = `WITH o AS (
    SELECT max(o.hwm_ms) AS floor, bool_or(` + live + `) AS busy
    FROM shardkit.slot_leases o WHERE ` + overlaps + `
)` + takeSlotUpdate

	// takeSlotFloorSQL is takeSlotSQL on a catalog that records its
	// history: the floor is at least the one set at the last change of
	// history, past every ID the holders of lost leases may have issued.
	takeSlotFloorSQL = `WITH o AS (
    SELECT GREATEST(max(o.hwm_ms), (SELECT floor_ms FROM shardkit.lease_epoch)) AS floor, bool_or(` + live + `) AS busy
    FROM shardkit.slot_leases o WHERE ` + overlaps + `
)` + takeSlotUpdate

	takeSlotUpdate = `
UPDATE shardkit.slot_leases AS l
SET holder = $3, leased_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => $4),
    hwm_ms = GREATEST(l.hwm_ms, $5)
FROM o WHERE l.bits = $1 AND l.slot = ` + picked + ` AND l.holder IS NULL AND NOT o.busy
RETURNING o.floor`

	// epochNowSQL reads the catalog's history (sqlCatalogEpoch) for
	// epochSQL, before the lock: the lock is held for the grant's rows
	// alone.
	epochNowSQL = `SELECT set_config('shardkit.lease_epoch_now', ` + epochExpr + `, true)`

	// epochSQL compares the catalog's history with the one the last grant
	// was made in. On another history (a failover that lost commits, a
	// restore) the grants it lost may have live holders that its rows
	// show free, so it holds every grant back for the longest TTL any
	// grant used ($1 ms, this leaser's, at least): by then those leases
	// have expired, and their holders, whose renewals fail (the row names
	// no one or someone else), have stopped. And it sets a floor for
	// every later lease: now plus the longest bound (TTL + MaxBorrow, $2
	// ms at least), past any ID those holders issued ahead of their
	// clocks. It writes only when something changed, and returns whether
	// grants are held back, and until when (unix ms).
	epochSQL = `WITH u AS (
    UPDATE shardkit.lease_epoch e SET
        epoch = c.now,
        hold_until = CASE WHEN e.epoch = c.now THEN e.hold_until
            ELSE clock_timestamp() + make_interval(secs => GREATEST(e.max_ttl_ms, $1::bigint) / 1000.0) END,
        floor_ms = CASE WHEN e.epoch = c.now THEN e.floor_ms
            ELSE (extract(epoch FROM clock_timestamp()) * 1000)::bigint + GREATEST(e.max_bound_ms, $2::bigint) END,
        max_ttl_ms = GREATEST(e.max_ttl_ms, $1::bigint),
        max_bound_ms = GREATEST(e.max_bound_ms, $2::bigint)
    FROM (SELECT current_setting('shardkit.lease_epoch_now') AS now) c
    WHERE e.epoch <> c.now OR e.max_ttl_ms < $1::bigint OR e.max_bound_ms < $2::bigint
    RETURNING e.hold_until
), h AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN (SELECT hold_until FROM u)
        ELSE (SELECT hold_until FROM shardkit.lease_epoch) END AS until
)
SELECT coalesce(until > statement_timestamp(), false), coalesce((extract(epoch FROM until) * 1000)::bigint, 0) FROM h`

	// hasEpochSQL: the catalog records its history (version 14) and this
	// role may write the record.
	hasEpochSQL = `SELECT CASE WHEN to_regclass('shardkit.lease_epoch') IS NULL THEN false
    ELSE has_table_privilege('shardkit.lease_epoch', 'SELECT') AND has_table_privilege('shardkit.lease_epoch', 'UPDATE') END`

	// renewSlotSQL extends a lease its holder still has.
	renewSlotSQL = `UPDATE shardkit.slot_leases
SET expires_at = clock_timestamp() + make_interval(secs => $4), hwm_ms = GREATEST(hwm_ms, $5)
WHERE bits = $1 AND slot = $2 AND holder = $3`

	// releaseSlotSQL frees a slot and records its holder's exact mark.
	releaseSlotSQL = `UPDATE shardkit.slot_leases
SET holder = NULL, expires_at = NULL, hwm_ms = $4
WHERE bits = $1 AND slot = $2 AND holder = $3`
)

// NewLeaser returns a Leaser on the catalog. It reads the slot bits from
// the catalog's configuration. A LeaseBits outside the layout's
// [slot_bits, seq_bits] is an error wrapping idgen.ErrInvalidLayout.
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
	layout := c.Layout
	bits := cfg.LeaseBits
	if bits == 0 {
		bits = layout.SlotBits
	}
	if bits < layout.SlotBits || bits > layout.SeqBits {
		return nil, fmt.Errorf("shardkit: %w: LeaseBits %d is outside [%d, %d], the catalog layout's slot and sequence bits; "+
			"use 0 for whole slots or at most %d", idgen.ErrInvalidLayout, cfg.LeaseBits, layout.SlotBits, layout.SeqBits, layout.SeqBits)
	}
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	return &Leaser{
		pool:     cat.pool,
		cfg:      cfg,
		maxSlot:  layout.Slots() - 1,
		slotBits: layout.SlotBits,
		bits:     bits,
		units:    (layout.Slots() - 1) << (bits - layout.SlotBits),
		holder:   cfg.Holder + ":" + hex.EncodeToString(tok[:]),
		ttlSecs:  cfg.TTL.Seconds(),
		deadline: cfg.TTL - cfg.Margin,
		bound:    (cfg.TTL + cfg.MaxBorrow).Milliseconds(),
		ensured:  map[uint8]bool{},
	}, nil
}

// Holder returns the name this leaser records in the catalog.
func (s *Leaser) Holder() string { return s.holder }

// Acquire is part of the idgen.Leaser interface: it leases LeaseBits bits.
// With every such lease held (or overlapping a live one) it returns an
// error wrapping ErrNoFreeSlot.
func (s *Leaser) Acquire(ctx context.Context) (*idgen.Lease, error) {
	return s.acquire(ctx, s.bits)
}

// AcquireBulk leases a whole slot for a generator's bulk work (it is what
// idgen.Generator asks for its extra slots): the most IDs per ms one lease
// can give. With none free it returns an error wrapping ErrNoFreeSlot.
func (s *Leaser) AcquireBulk(ctx context.Context) (*idgen.Lease, error) {
	return s.acquire(ctx, s.slotBits)
}

func (s *Leaser) acquire(ctx context.Context, bits uint8) (*idgen.Lease, error) {
	if s.maxSlot < 1 {
		return nil, fmt.Errorf("shardkit: %w: the layout has no slot bits, so only the database's next_id() issues IDs", ErrNoFreeSlot)
	}
	units := s.maxSlot << (bits - s.slotBits)
	sent := s.cfg.Clock.Now()
	bound := sent.UnixMilli() + s.bound
	slot, floor := 0, int64(0)
	if err := s.ensure(ctx, bits, units); err != nil {
		return nil, s.catalogError("lease an ID slot", err)
	}
	// A renewal may revive an overlapping lease between the pick and the
	// take; the take then refuses and the next try's pick skips it.
	var err error
	for range 8 {
		if slot, floor, err = s.tryTake(ctx, bits, bound); !errors.Is(err, errTaken) {
			break
		}
	}
	var held *HeldBackError
	if errors.As(err, &held) {
		return nil, err
	}
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, errTaken) {
		return nil, fmt.Errorf("shardkit: %w: all %d ID leases of %d bits are held by live processes or overlap one; "+
			"new rows take their keys from the database's next_id() until one frees up "+
			"(or give processes narrower leases: catalog.LeaserConfig.LeaseBits up to the layout's sequence bits)", ErrNoFreeSlot, units, bits)
	}
	if err != nil {
		return nil, s.catalogError("lease an ID slot", err)
	}
	l := idgen.NewLease(slot, floor, s.holder, s.cfg.TTL, sent.Add(s.deadline), bound)
	l.Bits = bits
	return l, nil
}

// errTaken: the picked lease was revived before the take.
var errTaken = errors.New("picked lease taken")

// tryTake is one try of an acquisition: lock, pick, clear and take in one
// transaction, sent as one pipeline, so that the lock that serialises
// acquisitions is held for the catalog's work alone, never across a
// round trip to a process that may be descheduled (hundreds of processes
// starting at once on busy hosts would otherwise queue behind each
// holder's scheduling, each waiter holding a pooled connection that the
// live leases' renewals need). No free lease: pgx.ErrNoRows.
func (s *Leaser) tryTake(ctx context.Context, bits uint8, bound int64) (slot int, floor int64, err error) {
	s.mu.Lock()
	epochs := s.epochs
	s.mu.Unlock()
	pick, take := pickSlotSQL, takeSlotSQL
	if epochs {
		pick, take = pickSlotHeldSQL, takeSlotFloorSQL
	}
	b := &pgx.Batch{}
	if epochs {
		b.Queue(epochNowSQL)
	}
	b.Queue(lockSlotsSQL)
	if epochs {
		b.Queue(epochSQL, s.cfg.TTL.Milliseconds(), s.bound)
	}
	b.Queue(pick, int(bits), s.maxSlot, bits > s.slotBits)
	b.Queue(clearExpiredSQL, int(bits), s.maxSlot)
	b.Queue(take, int(bits), s.maxSlot, s.holder, s.ttlSecs, bound)
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if epochs {
		if _, err := br.Exec(); err != nil {
			return 0, 0, err
		}
	}
	if _, err := br.Exec(); err != nil {
		return 0, 0, err
	}
	var held bool
	var until int64
	if epochs {
		if err := br.QueryRow().Scan(&held, &until); err != nil {
			return 0, 0, err
		}
	}
	if err := br.QueryRow().Scan(&slot); err != nil {
		return 0, 0, err
	}
	if _, err := br.Exec(); err != nil {
		return 0, 0, err
	}
	switch err := br.QueryRow().Scan(&floor); {
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return 0, 0, err
	case err == nil:
		// Taken: the pick found the hold over (each statement reads the
		// clock at its own start, so the epoch statement's held can be
		// true while the pick's, a moment later, is not). Reporting it
		// held back would leave the slot leased to no one who knows it
		// until its TTL ran out.
		return slot, floor, nil
	case held:
		return 0, 0, &HeldBackError{Until: time.UnixMilli(until)}
	case slot == 0:
		return 0, 0, pgx.ErrNoRows
	case err != nil:
		return 0, 0, errTaken
	}
	return slot, floor, nil
}

// ensure creates the rows of the leases of the given width, once per
// Leaser (rows are never deleted), and finds whether the catalog records
// its history for the leases.
func (s *Leaser) ensure(ctx context.Context, bits uint8, units int) error {
	s.mu.Lock()
	done, epochs := s.ensured[bits], s.epochs
	s.mu.Unlock()
	if !epochs {
		// A catalog not yet at version 14 grants without the hold; once
		// migrated, the next acquisition uses it.
		if err := s.pool.QueryRow(ctx, hasEpochSQL).Scan(&epochs); err != nil {
			return err
		}
		s.mu.Lock()
		s.epochs = epochs
		s.mu.Unlock()
	}
	if done {
		return nil
	}
	if _, err := s.pool.Exec(ctx, ensureSlotsSQL, int(bits), s.maxSlot, units); err != nil {
		return err
	}
	s.mu.Lock()
	s.ensured[bits] = true
	s.mu.Unlock()
	return nil
}

// leaseBits is the width of a lease this leaser handed out.
func (s *Leaser) leaseBits(l *idgen.Lease) int {
	if l.Bits == 0 {
		return int(s.slotBits)
	}
	return int(l.Bits)
}

// Renew is part of the idgen.Leaser interface. A slot taken by another
// holder returns an error wrapping idgen.ErrLeaseLost.
func (s *Leaser) Renew(ctx context.Context, l *idgen.Lease) error {
	sent := s.cfg.Clock.Now()
	bound := sent.UnixMilli() + s.bound
	tag, err := s.pool.Exec(ctx, renewSlotSQL, s.leaseBits(l), l.Slot, l.Holder, s.ttlSecs, bound)
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
	tag, err := s.pool.Exec(ctx, releaseSlotSQL, s.leaseBits(l), l.Slot, l.Holder, max(l.HighWater(), l.MinMs))
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
