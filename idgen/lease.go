package idgen

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Lease errors. Test with errors.Is.
var (
	// ErrNoFreeSlot reports that every application slot is held by a live
	// process. Callers fall back to the database: leave the primary key
	// zero so the column's DEFAULT next_id() fills it (slot 0).
	ErrNoFreeSlot = errors.New("no free ID slot")
	// ErrLeaseLost reports that a renewal or release found the slot held by
	// someone else (or gone): the lease must not be used any more.
	ErrLeaseLost = errors.New("ID slot lease lost")
	// ErrLeaseExpired reports that the generator's lease passed its local
	// deadline without a renewal: it stops issuing before another process
	// can take the slot.
	ErrLeaseExpired = errors.New("ID slot lease expired")
)

// Leaser hands out slots: the low SlotBits of every ID's sequence that
// keep the IDs of concurrent processes apart. Slot 0 is never leased (it
// belongs to the database's next_id()). catalog.Leaser is the Postgres
// implementation on the catalog; StaticLeaser serves a single process.
type Leaser interface {
	// Acquire leases a free slot. With none free it returns an error
	// wrapping ErrNoFreeSlot.
	Acquire(ctx context.Context) (*Lease, error)
	// Renew extends the lease and moves its deadline and MaxMs forward
	// (Lease.Extend). A lease someone else holds now gives ErrLeaseLost.
	Renew(ctx context.Context, l *Lease) error
	// Release frees the slot, recording l.HighWater() as its high-water mark.
	Release(ctx context.Context, l *Lease) error
}

// Lease is one slot held by one generator, valid until a local deadline.
//
// IDs issued under a lease have a time (unix ms) in (MinMs, MaxMs()] and are
// issued only before Deadline(). The lease holder moves the deadline and
// MaxMs forward on each renewal; the generator reports its exact high-water
// mark with SetHighWater before the lease is released.
type Lease struct {
	// Slot is the leased slot: the value of the low Bits bits of every
	// sequence issued under the lease. It is never 0 in its low SlotBits
	// bits (those belong to the database's next_id()).
	Slot int
	// Bits is how many low sequence bits the lease fixes, from the layout's
	// SlotBits (0 means that: a whole slot, 2^CounterBits IDs per ms per
	// shard) up to SeqBits (one ID per ms per shard). A lease of Bits > SlotBits
	// is a part of the slot Slot mod 2^SlotBits: (2^SlotBits-1) *
	// 2^(Bits-SlotBits) such leases exist, so more processes can issue IDs
	// at once, each at a lower rate. Leasers set it before handing the lease out.
	Bits uint8
	// MinMs is the previous holder's high-water mark (unix ms): no ID
	// under this lease has a time at or below it.
	MinMs int64
	// Holder names the holder in the catalog (host, pid and a random token).
	Holder string
	// TTL is how long a renewal extends the lease; the generator renews
	// every TTL/3. Zero means the lease never needs renewing.
	TTL time.Duration

	win atomic.Pointer[leaseWindow]
	hwm atomic.Int64

	// Set by the generator before it issues under the lease (unit).
	shift uint8  // sequence bits below the counter: Bits, or SlotBits
	cmax  uint64 // largest counter: 2^(SeqBits-shift)-1
}

type leaseWindow struct {
	deadline time.Time
	mono     int64 // deadline as monotonic ns since monoBase: the generator's fast path
	maxMs    int64
}

// monoBase anchors the generator's monotonic readings: time.Since(monoBase)
// is one clock read, time.Now two.
var monoBase = time.Now()

// farFuture is the deadline of a lease that never expires.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// NewLease returns a lease of slot, valid before deadline for IDs with a
// time in (minMs, maxMs]. Leasers call it; a Generator only reads it.
func NewLease(slot int, minMs int64, holder string, ttl time.Duration, deadline time.Time, maxMs int64) *Lease {
	l := &Lease{Slot: slot, MinMs: minMs, Holder: holder, TTL: ttl}
	l.hwm.Store(minMs)
	l.Extend(deadline, maxMs)
	return l
}

// Extend sets a new deadline and bound after a successful renewal. The
// deadline must be measured on the holder's clock from the moment the
// renewal was sent, minus a safety margin.
func (l *Lease) Extend(deadline time.Time, maxMs int64) {
	l.win.Store(&leaseWindow{deadline: deadline, mono: int64(deadline.Sub(monoBase)), maxMs: maxMs})
}

// Revoke ends the lease now: the generator stops issuing under it.
func (l *Lease) Revoke() { l.win.Store(&leaseWindow{}) }

// Deadline is the local time after which no ID may be issued under the lease.
func (l *Lease) Deadline() time.Time { return l.win.Load().deadline }

// MaxMs is the largest ID time (unix ms) the lease allows: the high-water
// mark recorded in the catalog at the last renewal.
func (l *Lease) MaxMs() int64 { return l.win.Load().maxMs }

// Valid reports whether IDs may be issued under the lease at now.
func (l *Lease) Valid(now time.Time) bool { return now.Before(l.win.Load().deadline) }

// SetHighWater records the time (unix ms) of the newest ID issued under the
// lease. Generator.Close calls it before releasing the slot.
func (l *Lease) SetHighWater(unixMs int64) {
	for {
		cur := l.hwm.Load()
		if unixMs <= cur || l.hwm.CompareAndSwap(cur, unixMs) {
			return
		}
	}
}

// HighWater returns the newest ID time (unix ms) recorded by SetHighWater,
// or MinMs when none was.
func (l *Lease) HighWater() int64 { return l.hwm.Load() }

// StaticLeaser leases one fixed slot that never expires. It is only safe
// when no other process issues IDs in that slot for the same shards: a
// single process, tests, tools. Use catalog.Leaser everywhere else.
type StaticLeaser struct {
	Slot int
}

var _ Leaser = StaticLeaser{}

// Acquire is part of the Leaser interface.
func (s StaticLeaser) Acquire(context.Context) (*Lease, error) {
	return NewLease(s.Slot, 0, "static", 0, farFuture, math.MaxInt64), nil
}

// Renew is part of the Leaser interface; a static lease needs none.
func (StaticLeaser) Renew(context.Context, *Lease) error { return nil }

// Release is part of the Leaser interface; there is nothing to free.
func (StaticLeaser) Release(context.Context, *Lease) error { return nil }
