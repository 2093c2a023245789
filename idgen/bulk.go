package idgen

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bulk IDs: one slot gives a process 2^CounterBits IDs per ms for a shard
// (16 by default), 1/64 of what the layout's sequence bits can hold. A bulk
// Fill for one shard borrows more slots from the same Leaser and uses them
// all for whole milliseconds at a time.
//
// Why this keeps IDs unique (DESIGN invariant 1): an extra slot is an
// ordinary lease, so no other process issues IDs in that slot while it is
// held, and the lease's MinMs / MaxMs / deadline bound its IDs' times
// exactly as for the generator's own slot. Inside the process, every path
// that issues for a shard moves the shard's one state word (time, counter)
// forward with a compare-and-swap and issues only above the old value: the
// own-slot paths one counter (or a run) in their slot, a bulk claim a run
// of counters in every distinct slot held. So for every (shard, slot) pair
// the (time, counter) pairs issued only go up, and each is issued once.

// bulkAheadMs is how far ahead of the clock a shard's own-slot IDs may run
// before a Fill asks for extra slots: more than a batch for one user
// needs, less than the borrow allowance.
const bulkAheadMs = 10

// bulk is a generator's set of extra slots.
type bulk struct {
	max  int           // most slots held, own included; <= 1: off
	idle time.Duration // release extras after this long unused

	// mu is held shared by a claim (from reading the set to recording
	// the claimed ms in each used lease), exclusively to change the set:
	// a lease removed from the set has its final high-water mark.
	mu     sync.RWMutex
	extras []*Lease

	want    chan struct{} // demand for more slots (buffer 1)
	lastUse atomic.Int64  // unix ns of the last demand or use of extra slots
	done    chan struct{}
}

// on reports whether the generator may lease extra slots.
func (b *bulk) on() bool { return b.max > 1 && b.done != nil }

// demand records one-shard pressure and wakes the keeper without blocking.
func (b *bulk) demand(now time.Time) {
	b.lastUse.Store(now.UnixNano())
	select {
	case b.want <- struct{}{}:
	default:
	}
}

// Slots returns the slots the generator issues in now (each lease's Slot:
// a part of a slot has a value above 2^SlotBits): its own first, then the
// extra slots leased for bulk work.
func (g *Generator) Slots() []int {
	g.bulk.mu.RLock()
	defer g.bulk.mu.RUnlock()
	s := []int{g.lease.Load().Slot}
	for _, e := range g.bulk.extras {
		s = append(s, e.Slot)
	}
	return s
}

// fillBulk takes the next rows of counters of one millisecond of shard in
// every slot held (a row is one counter value in each slot whose lease has
// it) and fills ids from them in increasing order. It returns how many it
// filled and false when no extra slot can serve (the caller then uses its
// own slot). old is the shard's state as the caller read it; ms and lim
// come from window; own is the generator's lease.
//
// The shard's state (time, counter) then means, for every slot the
// generator holds, that nothing above (time, counter) was issued for the
// shard: the claim starts where the state stands, as the own-slot paths
// do, and a last row used only in part wastes fewer IDs than slots held.
// Leases narrower than the widest held have fewer counters: they sit out
// the rows above their largest counter.
func (g *Generator) fillBulk(st *atomic.Uint64, old uint64, ms int64, lim limits, own *Lease, shard int, ids []int64) (int, bool) {
	b := &g.bulk
	b.mu.RLock()
	defer b.mu.RUnlock()
	if len(b.extras) == 0 {
		return 0, false
	}
	now := g.sleepClock.Now()
	held := make([]*Lease, 1, 1+len(b.extras))
	held[0] = own
	top := own.cmax // largest counter of any lease used
	for _, e := range b.extras {
		if slices.ContainsFunc(held, func(h *Lease) bool { return h.Slot == e.Slot && h.shift == e.shift }) ||
			!e.Valid(now) {
			continue
		}
		held = append(held, e)
		top = max(top, e.cmax)
	}
	m, first := g.successor(old, ms, top)
	if m > lim.limit {
		return 0, false
	}
	used := held[:1]
	for _, e := range held[1:] {
		if m > e.MinMs-g.epoch && m <= e.MaxMs()-g.epoch {
			used = append(used, e)
		}
	}
	if len(used) == 1 {
		return 0, false
	}
	// Rows first..last, enough for ids or up to the widest lease's last counter.
	last, n := first, 0
	for c := first; c <= top; c++ {
		for _, e := range used {
			if c <= e.cmax {
				n++
			}
		}
		last = c
		if n >= len(ids) {
			break
		}
	}
	if !st.CompareAndSwap(old, uint64(m)<<g.cbits|last) {
		return 0, true // the shard moved on: the caller reads it again
	}
	for _, e := range used[1:] {
		e.SetHighWater(m + g.epoch)
	}
	b.lastUse.Store(time.Now().UnixNano()) // in use: keep them
	n = 0
	for c := first; c <= last && n < len(ids); c++ {
		for _, e := range used {
			if n == len(ids) {
				break
			}
			if c <= e.cmax {
				ids[n] = g.compose(m, shard, c, e)
				n++
			}
		}
	}
	slices.Sort(ids[:n])
	return n, true
}

// keepBulk leases extra slots while bulk work wants them, renews them
// every TTL/3 and releases them after b.idle without bulk work.
func (g *Generator) keepBulk(ctx context.Context) {
	b := &g.bulk
	defer close(b.done)
	tick := min(b.idle/4, time.Second)
	if ttl := g.lease.Load().TTL; ttl > 0 {
		tick = min(tick, ttl/6) // extras are renewed every TTL/3
	}
	tick = max(tick, 5*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	renewed := map[*Lease]time.Time{}
	var noSlotsUntil time.Time
	for {
		var tc <-chan time.Time // without extra slots, only demand wakes the keeper
		if len(g.Slots()) > 1 {
			tc = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-b.want:
		case <-tc:
		}
		now := time.Now()
		recent := now.Sub(time.Unix(0, b.lastUse.Load())) < b.idle
		if !recent {
			g.dropExtras(ctx, nil)
			clear(renewed)
			continue
		}
		g.renewExtras(ctx, renewed)
		if now.Before(noSlotsUntil) {
			continue
		}
		for len(g.Slots()) < b.max && ctx.Err() == nil {
			l, err := g.acquireExtra(ctx)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, ErrNoFreeSlot) {
					slog.Warn("shardkit: leasing an extra ID slot for bulk work", "err", err)
				}
				noSlotsUntil = time.Now().Add(time.Second)
				break
			}
			if slices.Contains(g.Slots(), l.Slot) || adopt(g.layout, l) != nil {
				// A leaser that hands out a slot we hold (StaticLeaser does)
				// cannot give more: stop asking for a while.
				noSlotsUntil = time.Now().Add(time.Minute)
				break
			}
			renewed[l] = time.Now()
			b.mu.Lock()
			b.extras = append(b.extras, l)
			b.mu.Unlock()
		}
	}
}

// bulkLeaser is a Leaser with a separate choice for extra slots: it may
// hand out wider leases for bulk work than for a generator's own slot
// (catalog.Leaser does: its own leases may be narrow so many processes fit,
// while bulk work wants as many IDs per ms as a free slot gives).
type bulkLeaser interface {
	AcquireBulk(ctx context.Context) (*Lease, error)
}

// acquireExtra leases one extra slot for bulk work.
func (g *Generator) acquireExtra(ctx context.Context) (*Lease, error) {
	if bl, ok := g.leaser.(bulkLeaser); ok {
		return bl.AcquireBulk(ctx)
	}
	return g.leaser.Acquire(ctx)
}

// renewExtras renews the extra leases due (every TTL/3) and drops the ones
// lost or past their deadline.
func (g *Generator) renewExtras(ctx context.Context, renewed map[*Lease]time.Time) {
	g.bulk.mu.RLock()
	extras := slices.Clone(g.bulk.extras)
	g.bulk.mu.RUnlock()
	var gone []*Lease
	for _, l := range extras {
		if l.TTL <= 0 || time.Since(renewed[l]) < l.TTL/3 {
			continue
		}
		if !l.Valid(g.sleepClock.Now()) {
			gone = append(gone, l)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, l.TTL/3)
		err := g.leaser.Renew(rctx, l)
		cancel()
		switch {
		case err == nil:
			renewed[l] = time.Now()
		case errors.Is(err, ErrLeaseLost):
			l.Revoke()
			gone = append(gone, l)
		}
	}
	if len(gone) > 0 {
		g.dropExtras(ctx, gone)
	}
	for _, l := range gone {
		delete(renewed, l)
	}
}

// dropExtras removes the given extra leases (all when which is nil) from
// the set and releases them with their exact high-water marks.
func (g *Generator) dropExtras(ctx context.Context, which []*Lease) {
	b := &g.bulk
	b.mu.Lock()
	var drop []*Lease
	if which == nil {
		drop, b.extras = b.extras, nil
	} else {
		b.extras = slices.DeleteFunc(b.extras, func(l *Lease) bool {
			if slices.Contains(which, l) {
				drop = append(drop, l)
				return true
			}
			return false
		})
	}
	b.mu.Unlock()
	// No claim uses a dropped lease any more: its mark is final.
	for _, l := range drop {
		if err := g.leaser.Release(ctx, l); err != nil && !errors.Is(err, ErrLeaseLost) {
			slog.Warn("shardkit: releasing an extra ID slot", "slot", l.Slot, "err", err)
		}
		l.Revoke()
	}
}
