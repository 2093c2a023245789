package idgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// narrowLease returns a lease of the given width valid for a minute on c.
func narrowLease(c *fakeClock, slot int, bits uint8) *Lease {
	l := NewLease(slot, 0, "test", 0, c.Now().Add(time.Minute), math.MaxInt64)
	l.Bits = bits
	return l
}

// TestNarrowLeaseIDs: a lease of all 10 sequence bits gives one ID per ms
// per shard, borrows up to MaxBorrow ahead like a whole slot, and every ID
// carries the lease's 10 bits, so its slot (the low 6) is never next_id()'s 0.
func TestNarrowLeaseIDs(t *testing.T) {
	c := newFakeClock(t0)
	g, err := New(DefaultLayout(), narrowLease(c, 69, 10), Config{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 101 {
		p := mustDecode(t, g, 4)
		if p.UnixMs != t0+int64(i) || p.Seq != 69 || p.Slot != 5 {
			t.Fatalf("ID %d: time %d seq %d slot %d, want %d, 69 and 5", i, p.UnixMs, p.Seq, p.Slot, t0+int64(i))
		}
	}
	if c.Slept() != 0 {
		t.Fatalf("slept %v while borrowing", c.Slept())
	}
	if p := mustDecode(t, g, 4); p.UnixMs != t0+101 || c.Slept() != time.Millisecond {
		t.Fatalf("after the borrow limit: time %d, slept %v; want %d and 1ms", p.UnixMs, c.Slept(), t0+101)
	}
	ids := make([]int64, 50)
	if err := g.Fill(context.Background(), 9, ids); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		p, _ := g.Layout().Decode(id)
		if p.Shard != 9 || p.Seq != 69 || (i > 0 && id <= ids[i-1]) {
			t.Fatalf("Fill ID %d = %+v after %d", id, p, ids[max(i-1, 0)])
		}
	}
}

func mustDecode(t *testing.T, g *Generator, shard int) Parts {
	t.Helper()
	id, err := g.Next(context.Background(), shard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Layout().Decode(id)
	if err != nil || p.Shard != shard {
		t.Fatalf("ID %d decodes to %+v, %v; want shard %d", id, p, err, shard)
	}
	return p
}

// TestNarrowLeaseRefused: leases narrower than a slot, wider than the
// sequence, or on next_id()'s slot 0 are refused.
func TestNarrowLeaseRefused(t *testing.T) {
	c := newFakeClock(t0)
	for _, tc := range []struct {
		slot int
		bits uint8
	}{{5, 5}, {5, 11}, {64, 10}, {0, 8}, {256, 8}, {1024, 10}, {-1, 10}} {
		_, err := New(DefaultLayout(), narrowLease(c, tc.slot, tc.bits), Config{Clock: c})
		if !errors.Is(err, ErrOutOfRange) {
			t.Errorf("slot %d of %d bits: %v, want ErrOutOfRange", tc.slot, tc.bits, err)
		}
	}
}

// TestEveryNarrowLeaseDistinct: the 1008 leases of 10 bits (every
// sequence value but next_id()'s 16), each issuing a burst on the same
// shard in the same ms range, plus slot 0's values: no duplicate.
func TestEveryNarrowLeaseDistinct(t *testing.T) {
	layout := DefaultLayout()
	seen := map[int64]string{}
	n := 0
	for slot := 1; slot < 1<<layout.SeqBits; slot++ {
		if slot%layout.Slots() == 0 {
			continue
		}
		n++
		c := newFakeClock(t0)
		g, err := New(layout, narrowLease(c, slot, 10), Config{Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := g.NextN(context.Background(), 11, 30)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if prev, dup := seen[id]; dup {
				t.Fatalf("ID %d from lease %d and %s", id, slot, prev)
			}
			seen[id] = fmt.Sprint("lease ", slot)
		}
	}
	// next_id(): slot 0, counter in the top 4 sequence bits.
	for ms := t0; ms < t0+30; ms++ {
		for cnt := range 1 << layout.CounterBits() {
			id, err := layout.Compose(ms, 11, layout.SeqOf(cnt, 0))
			if err != nil {
				t.Fatal(err)
			}
			if prev, dup := seen[id]; dup {
				t.Fatalf("next_id()'s ID %d also from %s", id, prev)
			}
		}
	}
	if n != 1008 {
		t.Fatalf("%d leases of 10 bits, want 1008", n)
	}
}

// TestLeaseNarrowsUnderAGenerator: when a generator's lease is replaced by
// a narrower one (a lost lease re-leased at another width), a counter left
// in the shard state by the wider lease does not spill into the shard bits.
func TestLeaseNarrowsUnderAGenerator(t *testing.T) {
	c := newFakeClock(t0)
	g, err := New(DefaultLayout(), narrowLease(c, 5, 0), Config{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		mustDecode(t, g, 3) // counter 11 at t0
	}
	narrow := narrowLease(c, 70, 10)
	if err := adopt(g.layout, narrow); err != nil {
		t.Fatal(err)
	}
	g.lease.Store(narrow)
	for i := range 5 {
		p := mustDecode(t, g, 3)
		if p.Seq != 70 || p.UnixMs != t0+1+int64(i) {
			t.Fatalf("after narrowing: %+v, want seq 70 at %d", p, t0+1+int64(i))
		}
	}
}

// widthLeaser leases narrow units for a generator's own slot and whole
// slots for bulk work, as catalog.Leaser does; units never overlap.
type widthLeaser struct {
	mu   sync.Mutex
	own  int // next narrow unit of slot 1: 1, 65, 129, ...
	bulk int // next whole slot: 2, 3, ...
}

func (w *widthLeaser) Acquire(context.Context) (*Lease, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := NewLease(1+64*w.own, 0, "narrow", time.Minute, time.Now().Add(time.Minute), math.MaxInt64)
	l.Bits = 10
	w.own++
	return l, nil
}

func (w *widthLeaser) AcquireBulk(context.Context) (*Lease, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bulk >= 62 {
		return nil, ErrNoFreeSlot
	}
	w.bulk++
	return NewLease(1+w.bulk, 0, "bulk", time.Minute, time.Now().Add(time.Minute), math.MaxInt64), nil
}

func (*widthLeaser) Renew(_ context.Context, l *Lease) error {
	l.Extend(time.Now().Add(time.Minute), math.MaxInt64)
	return nil
}

func (*widthLeaser) Release(context.Context, *Lease) error { return nil }

// TestBulkMixedWidths: a generator on a narrow lease takes whole slots for
// bulk work; IDs stay unique and increasing and reach the whole slots' rate.
func TestBulkMixedWidths(t *testing.T) {
	ctx := context.Background()
	g, stop, err := Start(ctx, DefaultLayout(), &widthLeaser{}, Config{BulkSlots: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var all []int64
	batch := make([]int64, 1000)
	for len(g.Slots()) < 5 {
		if err := g.Fill(ctx, 7, batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	for range 20 {
		if err := g.Fill(ctx, 7, batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	perMs := map[int64]int{}
	for i, id := range all {
		p, _ := g.Layout().Decode(id)
		if p.Shard != 7 || p.Slot == 0 || (i > 0 && id <= all[i-1]) {
			t.Fatalf("ID %d = %+v after %d", id, p, all[max(i-1, 0)])
		}
		perMs[p.UnixMs]++
	}
	top := slices.Max(mapValues(perMs))
	if want := 4*16 + 1; top != want {
		t.Fatalf("at most %d IDs in one ms, want %d (4 whole slots and the own narrow lease)", top, want)
	}
}

func mapValues(m map[int64]int) []int {
	var v []int
	for _, n := range m {
		v = append(v, n)
	}
	return v
}

// TestMixedWidthsDistinct: a whole slot, the four 8-bit parts of another
// and the sixteen 10-bit parts of a third, each issuing bursts (borrowing
// ahead) and Fills on the same shard from the same ms: no duplicate, and
// each lease's IDs end in its own bits.
func TestMixedWidthsDistinct(t *testing.T) {
	layout := DefaultLayout()
	type unit struct {
		slot int
		bits uint8
	}
	units := []unit{{1, 6}}
	for p := range 4 {
		units = append(units, unit{2 + p<<6, 8})
	}
	for p := range 16 {
		units = append(units, unit{3 + p<<6, 10})
	}
	seen := map[int64]unit{}
	for _, u := range units {
		c := newFakeClock(t0)
		g, err := New(layout, narrowLease(c, u.slot, u.bits), Config{Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for range 40 {
			id, err := g.Next(context.Background(), 11)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		more, err := g.NextN(context.Background(), 11, 60)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range append(ids, more...) {
			p, _ := layout.Decode(id)
			if p.Shard != 11 || p.Seq&(1<<u.bits-1) != u.slot {
				t.Fatalf("lease %+v issued %d = %+v", u, id, p)
			}
			if other, dup := seen[id]; dup {
				t.Fatalf("ID %d from leases %+v and %+v", id, u, other)
			}
			seen[id] = u
		}
	}
}
