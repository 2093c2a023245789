package idgen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// poolLeaser is an in-memory Leaser of slots 1..n for one process: it
// records each slot's holder and the high-water mark of every release, so
// tests can check what the catalog would have recorded.
type poolLeaser struct {
	mu       sync.Mutex
	n        int
	held     map[int]bool
	released map[int]int64 // slot -> newest mark released
	ttl      time.Duration
}

func newPoolLeaser(n int) *poolLeaser {
	return &poolLeaser{n: n, held: map[int]bool{}, released: map[int]int64{}, ttl: time.Minute}
}

func (p *poolLeaser) Acquire(context.Context) (*Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := 1; s <= p.n; s++ {
		if !p.held[s] {
			p.held[s] = true
			return NewLease(s, p.released[s], "pool", p.ttl, time.Now().Add(p.ttl), math.MaxInt64), nil
		}
	}
	return nil, fmt.Errorf("pool: %w", ErrNoFreeSlot)
}

func (p *poolLeaser) Renew(_ context.Context, l *Lease) error {
	l.Extend(time.Now().Add(p.ttl), math.MaxInt64)
	return nil
}

func (p *poolLeaser) Release(_ context.Context, l *Lease) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held[l.Slot] {
		return ErrLeaseLost
	}
	p.held[l.Slot] = false
	p.released[l.Slot] = max(p.released[l.Slot], l.HighWater())
	return nil
}

func (p *poolLeaser) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, h := range p.held {
		if h {
			n++
		}
	}
	return n
}

// waitSlots waits until the generator holds want slots.
func waitSlots(t *testing.T, g *Generator, want int) {
	t.Helper()
	for start := time.Now(); len(g.Slots()) != want; time.Sleep(time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("generator holds slots %v, want %d of them", g.Slots(), want)
		}
	}
}

// TestBulkFillLeasesExtraSlots: a long Fill on one shard leases extra
// slots, uses whole milliseconds of all of them, keeps every ID unique and
// increasing, and on Close releases every slot with a mark at or above the
// newest ID issued in it.
func TestBulkFillLeasesExtraSlots(t *testing.T) {
	ctx := context.Background()
	p := newPoolLeaser(63)
	g, _, err := Start(ctx, DefaultLayout(), p, Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := g.Layout()
	var all []int64
	batch := make([]int64, 4096)
	// The first Fill asks for the slots; wait for them, then fill more.
	if err := g.Fill(ctx, 7, batch); err != nil {
		t.Fatal(err)
	}
	all = append(all, batch...)
	waitSlots(t, g, DefaultBulkSlots)
	for range 30 {
		if err := g.Fill(ctx, 7, batch); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
	}
	newest := map[int]int64{} // slot -> newest unix ms issued in it
	perMs := map[int64]int{}
	for i, id := range all {
		d, _ := l.Decode(id)
		if d.Shard != 7 || d.Slot == 0 {
			t.Fatalf("ID %d decodes to %+v", id, d)
		}
		if i > 0 && id <= all[i-1] {
			t.Fatalf("ID %d after %d", id, all[i-1])
		}
		newest[d.Slot] = max(newest[d.Slot], d.UnixMs)
		perMs[d.UnixMs]++
	}
	top := 0
	for _, n := range perMs {
		top = max(top, n)
	}
	if want := DefaultBulkSlots << l.CounterBits(); top != want {
		t.Fatalf("at most %d IDs in one ms, want %d (%d slots × %d)", top, want, DefaultBulkSlots, 1<<l.CounterBits())
	}
	if len(newest) < DefaultBulkSlots {
		t.Fatalf("IDs in %d slots, want at least %d", len(newest), DefaultBulkSlots)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.heldCount(); n != 0 {
		t.Fatalf("%d slots still held after Close", n)
	}
	for s, ms := range newest {
		if p.released[s] < ms {
			t.Fatalf("slot %d released with mark %d, below its newest ID's time %d", s, p.released[s], ms)
		}
	}
}

// TestBulkAndNextConcurrent: bulk Fills, single Nexts and small Fills on
// the same shard from several goroutines, while extra slots come and go
// (a short idle time): no duplicates, and each goroutine's IDs increase.
func TestBulkAndNextConcurrent(t *testing.T) {
	ctx := context.Background()
	p := newPoolLeaser(20)
	g, stop, err := Start(ctx, DefaultLayout(), p, Config{BulkSlots: 8, BulkIdle: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const workers = 4
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			for i := range 300 {
				switch (w + i) % 3 {
				case 0:
					ids, err := g.NextN(ctx, 3, 200+i)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, ids...)
				case 1:
					id, err := g.Next(ctx, 3)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, id)
				default:
					ids, err := g.NextN(ctx, 3, 5)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, ids...)
				}
				if i%50 == 0 {
					time.Sleep(30 * time.Millisecond) // let extras go idle
				}
			}
			out[w] = mine
		}()
	}
	wg.Wait()
	var all []int64
	for w, ids := range out {
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("worker %d: ID %d after %d", w, ids[i], ids[i-1])
			}
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	perMs := map[int64]int{}
	for i, id := range all {
		if i > 0 && id == all[i-1] {
			t.Fatalf("duplicate ID %d", id)
		}
		perMs[g.Layout().UnixMsOf(id)]++
	}
	top := 0
	for _, n := range perMs {
		top = max(top, n)
	}
	if top <= 1<<g.Layout().CounterBits() {
		t.Fatalf("at most %d IDs in one ms: extra slots were never used", top)
	}
}

// TestBulkReleasesIdleSlots: extra slots go back after BulkIdle without
// bulk work, with their marks.
func TestBulkReleasesIdleSlots(t *testing.T) {
	ctx := context.Background()
	p := newPoolLeaser(10)
	g, stop, err := Start(ctx, DefaultLayout(), p, Config{BulkSlots: 4, BulkIdle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ids := make([]int64, 1000)
	for len(g.Slots()) < 4 {
		if err := g.Fill(ctx, 1, ids); err != nil {
			t.Fatal(err)
		}
	}
	waitSlots(t, g, 1)
	// Released after they leave the set: wait for the leaser to see it.
	for start := time.Now(); p.heldCount() != 1; time.Sleep(time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d slots held after the idle time, want 1", p.heldCount())
		}
	}
}

// TestBulkStaticLeaser: a StaticLeaser hands out the same slot again; the
// generator must not use it twice.
func TestBulkStaticLeaser(t *testing.T) {
	ctx := context.Background()
	g, stop, err := Start(ctx, DefaultLayout(), StaticLeaser{Slot: 9}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ids, err := g.NextN(ctx, 2, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ID %d after %d", ids[i], ids[i-1])
		}
	}
	if s := g.Slots(); !slices.Equal(s, []int{9}) {
		t.Fatalf("slots %v with a static leaser, want [9]", s)
	}
}

// TestBulkOff: BulkSlots 1 keeps a generator to its own slot.
func TestBulkOff(t *testing.T) {
	ctx := context.Background()
	p := newPoolLeaser(10)
	g, stop, err := Start(ctx, DefaultLayout(), p, Config{BulkSlots: 1, MaxBorrow: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := g.NextN(ctx, 2, 2000); err != nil {
		t.Fatal(err)
	}
	if n := p.heldCount(); n != 1 {
		t.Fatalf("%d slots held with BulkSlots 1", n)
	}
}

// TestBulkNotForBatches: batches of 100 IDs spread over shards (a service's
// batch inserts) never run a shard far ahead of the clock, so they lease no
// extra slots.
func TestBulkNotForBatches(t *testing.T) {
	ctx := context.Background()
	p := newPoolLeaser(63)
	g, stop, err := Start(ctx, DefaultLayout(), p, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ids := make([]int64, 100)
	for i := range 2000 {
		if err := g.Fill(ctx, i, ids); err != nil {
			t.Fatal(err)
		}
	}
	if n, asked := p.heldCount(), g.bulk.lastUse.Load(); n != 1 || asked != 0 {
		t.Fatalf("%d slots held after batches over many shards (extra slots asked for at %d), want 1 and never", n, asked)
	}
}
