package idgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// maxGeneratorShardBits bounds the per-shard state (8 bytes a shard).
const maxGeneratorShardBits = 20

// sealed marks a shard's state after Close: no more IDs.
const sealed = 1 << 63

// Generator issues IDs for every logical shard inside one leased slot. It
// is safe for concurrent use. Per shard, each ID is greater than every ID
// it issued before for that shard.
type Generator struct {
	layout     Layout
	epoch      int64  // layout.EpochMs
	cbits      uint8  // counter bits of the per-shard state: the layout's, the widest a lease has
	cmask      uint64 // largest counter in the state
	timeShift  uint8  // ShardBits + SeqBits
	maxTime    int64  // layout.MaxTimeMs()
	borrow     int64  // ms
	regress    int64  // ms
	clock      Clock  // nil: time.Now, on the fast path
	sleepClock Clock  // never nil

	lease   atomic.Pointer[Lease]
	maxSeen atomic.Int64 // highest clock reading, ms since epoch
	// wallOffset turns a monotonic reading (ns since monoBase) into unix ns;
	// the slow path re-reads the wall clock and moves it.
	wallOffset atomic.Int64
	shards     []atomic.Uint64
	closed     atomic.Bool

	// Extra slots for bulk work (bulk.go); leased only under Start.
	bulk bulk

	// Set by Start: the renew loop and its leaser.
	leaser Leaser
	stop   context.CancelFunc
	done   chan struct{}
}

// New returns a generator issuing IDs under lease, which the caller keeps
// renewed (Start does all of that). The lease's slot must be in
// 1..2^SlotBits-1.
func New(layout Layout, lease *Lease, cfg Config) (*Generator, error) {
	if err := layout.Validate(); err != nil {
		return nil, fmt.Errorf("shardkit: %w", err)
	}
	if layout.ShardBits > maxGeneratorShardBits {
		return nil, fmt.Errorf("shardkit: %w: a generator keeps state per shard and supports at most %d shard bits, not %d",
			ErrInvalidLayout, maxGeneratorShardBits, layout.ShardBits)
	}
	if lease == nil {
		return nil, fmt.Errorf("shardkit: idgen.New: nil lease")
	}
	if err := adopt(layout, lease); err != nil {
		return nil, err
	}
	g := &Generator{
		layout:    layout,
		epoch:     layout.EpochMs,
		cbits:     layout.CounterBits(),
		cmask:     1<<layout.CounterBits() - 1,
		timeShift: layout.ShardBits + layout.SeqBits,
		maxTime:   layout.MaxTimeMs(),
		borrow:    DefaultMaxBorrow.Milliseconds(),
		regress:   DefaultMaxClockRegression.Milliseconds(),
		clock:     cfg.Clock,
		shards:    make([]atomic.Uint64, layout.MaxShards()),
	}
	switch {
	case cfg.MaxBorrow < 0:
		g.borrow = 0
	case cfg.MaxBorrow > 0:
		g.borrow = cfg.MaxBorrow.Milliseconds()
	}
	if cfg.MaxClockRegression > 0 {
		g.regress = cfg.MaxClockRegression.Milliseconds()
	}
	g.bulk.max, g.bulk.idle = DefaultBulkSlots, DefaultBulkIdle
	if cfg.BulkSlots != 0 {
		g.bulk.max = min(cfg.BulkSlots, layout.Slots()-1)
	}
	if cfg.BulkIdle > 0 {
		g.bulk.idle = cfg.BulkIdle
	}
	g.sleepClock = cfg.Clock
	if g.sleepClock == nil {
		g.sleepClock = systemClock{}
	}
	g.lease.Store(lease)
	g.now()
	return g, nil
}

// adopt checks that a lease fits the layout and sets what the generator
// reads from it on every ID: where the counter sits and its largest value.
func adopt(layout Layout, l *Lease) error {
	bits := l.Bits
	if bits == 0 {
		bits = layout.SlotBits
	}
	if bits < layout.SlotBits || bits > layout.SeqBits {
		return fmt.Errorf("shardkit: %w: a lease of %d bits is outside [%d, %d], the layout's slot and sequence bits",
			ErrOutOfRange, l.Bits, layout.SlotBits, layout.SeqBits)
	}
	if l.Slot <= 0 || l.Slot >= 1<<bits || l.Slot&(layout.Slots()-1) == 0 {
		return fmt.Errorf("shardkit: %w: slot %d of a %d-bit lease is outside [1, %d) or has its low %d bits 0 (slot 0 belongs to the database's next_id())",
			ErrOutOfRange, l.Slot, bits, 1<<bits, layout.SlotBits)
	}
	l.shift, l.cmax = bits, 1<<(layout.SeqBits-bits)-1
	return nil
}

// Layout returns the generator's ID layout.
func (g *Generator) Layout() Layout { return g.layout }

// Lease returns the lease the generator currently issues under.
func (g *Generator) Lease() *Lease { return g.lease.Load() }

// now reads the clock; with the system clock it also re-bases the fast
// path's monotonic-to-wall offset, so wall clock steps are noticed there.
func (g *Generator) now() time.Time {
	if g.clock == nil {
		t := time.Now()
		g.wallOffset.Store(t.UnixNano() - int64(t.Sub(monoBase)))
		return t
	}
	return g.clock.Now()
}

// Next returns a new ID for a logical shard. It waits (honouring ctx) when
// the shard's rate exceeds what the slot may borrow, when the clock is
// behind the lease's start mark, or after a small clock regression.
func (g *Generator) Next(ctx context.Context, shard int) (int64, error) {
	if uint(shard) >= uint(len(g.shards)) {
		return 0, g.shardError(shard)
	}
	l := g.lease.Load()
	w := l.win.Load()
	var raw int64
	if g.clock == nil {
		mono := int64(time.Since(monoBase))
		if mono >= w.mono {
			return g.nextSlow(ctx, shard)
		}
		raw = (mono+g.wallOffset.Load())/1e6 - g.epoch
	} else {
		now := g.clock.Now()
		if !now.Before(w.deadline) {
			return g.nextSlow(ctx, shard)
		}
		raw = now.UnixMilli() - g.epoch
	}
	ms := raw
	if seen := g.maxSeen.Load(); ms > seen {
		// Once per ms: losing the race leaves a lower bound (harmless); the
		// winner re-reads the wall clock so steps show up within a ms.
		if g.maxSeen.CompareAndSwap(seen, ms) && g.clock == nil {
			g.now()
		}
	} else if ms < seen {
		ms = seen // never go back in time; the borrow limit below still uses raw
	}
	limit := min(raw+g.borrow, w.maxMs-g.epoch, g.maxTime)
	floor := l.MinMs - g.epoch
	st := &g.shards[shard]
	for {
		old := st.Load()
		oms, cnt := int64(old>>g.cbits), old&g.cmask
		var nms int64
		var ncnt uint64
		switch {
		case ms > oms:
			nms = ms
		case cnt < l.cmax:
			nms, ncnt = oms, cnt+1
		default:
			nms = oms + 1
		}
		if nms > limit || nms <= floor {
			break
		}
		if st.CompareAndSwap(old, uint64(nms)<<g.cbits|ncnt) {
			return nms<<g.timeShift | int64(shard)<<g.layout.SeqBits | int64(ncnt)<<l.shift | int64(l.Slot), nil
		}
	}
	return g.nextSlow(ctx, shard)
}

// nextSlow issues one ID, waiting as needed, or says why it cannot.
func (g *Generator) nextSlow(ctx context.Context, shard int) (int64, error) {
	for {
		ms, lim, l, err := g.window(ctx)
		if err != nil {
			return 0, err
		}
		st := &g.shards[shard]
		old := st.Load()
		if old&sealed != 0 {
			return 0, fmt.Errorf("shardkit: %w", ErrClosed)
		}
		nms, ncnt := g.successor(old, ms, l.cmax)
		if nms > lim.limit {
			if err := g.waitFor(ctx, nms, lim); err != nil {
				return 0, err
			}
			continue
		}
		if st.CompareAndSwap(old, uint64(nms)<<g.cbits|ncnt) {
			return g.compose(nms, shard, ncnt, l), nil
		}
	}
}

// limits are the bounds on the next ID's time, ms since epoch.
type limits struct {
	raw   int64 // the clock
	limit int64 // largest time an ID may have now
	lease int64 // the lease's MaxMs
}

// window reads the clock and the lease and returns the time the next ID
// should have (ms since epoch, never below an earlier reading), the
// limits on it, and the lease; it waits out a clock behind the lease's
// start mark or a small regression, and fails on an expired lease, a
// large regression, or a closed generator.
func (g *Generator) window(ctx context.Context) (int64, limits, *Lease, error) {
	for {
		if err := ctx.Err(); err != nil {
			return 0, limits{}, nil, err
		}
		if g.closed.Load() {
			return 0, limits{}, nil, fmt.Errorf("shardkit: %w", ErrClosed)
		}
		now := g.now()
		l := g.lease.Load()
		w := l.win.Load()
		if !now.Before(w.deadline) {
			return 0, limits{}, nil, fmt.Errorf("shardkit: %w: slot %d could not be renewed in time (deadline %s); "+
				"check the catalog connection; IDs resume once a slot is leased again, meanwhile use the database's next_id()",
				ErrLeaseExpired, l.Slot, w.deadline.UTC().Format(time.RFC3339Nano))
		}
		raw := now.UnixMilli() - g.epoch
		if raw > g.maxTime {
			return 0, limits{}, nil, fmt.Errorf("shardkit: %w: the clock is past the layout's last millisecond (%s)",
				ErrOutOfRange, time.UnixMilli(g.epoch+g.maxTime).UTC().Format(time.RFC3339))
		}
		seen := g.observe(raw)
		floor := l.MinMs - g.epoch
		var wait int64
		switch {
		case seen-raw > g.regress:
			return 0, limits{}, nil, &ClockError{Behind: time.Duration(seen-raw) * time.Millisecond, Of: "IDs already issued", Limit: time.Duration(g.regress) * time.Millisecond}
		case floor-raw >= g.regress:
			return 0, limits{}, nil, &ClockError{Behind: time.Duration(floor-raw+1) * time.Millisecond, Of: fmt.Sprintf("slot %d's previous holder", l.Slot), Limit: time.Duration(g.regress) * time.Millisecond}
		case raw <= floor:
			wait = floor - raw + 1
		case seen-raw > g.borrow:
			wait = seen - raw - g.borrow
		}
		if wait > 0 {
			if err := g.sleepClock.Sleep(ctx, time.Duration(wait)*time.Millisecond); err != nil {
				return 0, limits{}, nil, err
			}
			continue
		}
		lim := limits{raw: raw, lease: w.maxMs - g.epoch}
		lim.limit = min(raw+g.borrow, lim.lease, g.maxTime)
		return max(raw, seen), lim, l, nil
	}
}

// observe raises maxSeen to raw and returns it.
func (g *Generator) observe(raw int64) int64 {
	for {
		seen := g.maxSeen.Load()
		if raw <= seen {
			return seen
		}
		if g.maxSeen.CompareAndSwap(seen, raw) {
			return raw
		}
	}
}

// successor returns the (time, counter) after state old at time ms, in a
// lease whose largest counter is cmax. The state's counter may be above
// cmax (written under a wider lease before): the next ms then starts.
func (g *Generator) successor(old uint64, ms int64, cmax uint64) (int64, uint64) {
	oms, cnt := int64(old>>g.cbits), old&g.cmask
	switch {
	case ms > oms:
		return ms, 0
	case cnt < cmax:
		return oms, cnt + 1
	default:
		return oms + 1, 0
	}
}

// waitFor sleeps until an ID at time nms fits lim, or fails.
func (g *Generator) waitFor(ctx context.Context, nms int64, lim limits) error {
	if nms > g.maxTime {
		return fmt.Errorf("shardkit: %w: the layout's time bits are used up", ErrOutOfRange)
	}
	d := nms - lim.raw - g.borrow // time for the clock to catch up
	if nms > lim.lease {
		// The clock ran past what the catalog recorded at the last renewal
		// (a forward step): wait for the next renewal to raise the bound.
		d = max(d, 10)
	}
	return g.sleepClock.Sleep(ctx, time.Duration(max(d, 1))*time.Millisecond)
}

func (g *Generator) compose(ms int64, shard int, cnt uint64, l *Lease) int64 {
	return ms<<g.timeShift | int64(shard)<<g.layout.SeqBits | int64(cnt)<<l.shift | int64(l.Slot)
}

func (g *Generator) shardError(shard int) error {
	return fmt.Errorf("shardkit: %w: shard %d is outside [0, %d)", ErrOutOfRange, shard, len(g.shards))
}

// HighWater returns the time (unix ms) of the newest ID issued so far, or
// 0 when none was.
func (g *Generator) HighWater() int64 {
	var top int64
	for i := range g.shards {
		if ms := int64((g.shards[i].Load() &^ sealed) >> g.cbits); ms > top {
			top = ms
		}
	}
	if top == 0 {
		return 0
	}
	return top + g.epoch
}

// seal stops every shard and returns the exact high-water mark.
func (g *Generator) seal() int64 {
	g.closed.Store(true)
	for i := range g.shards {
		st := &g.shards[i]
		for {
			old := st.Load()
			if old&sealed != 0 || st.CompareAndSwap(old, old|sealed) {
				break
			}
		}
	}
	return g.HighWater()
}
