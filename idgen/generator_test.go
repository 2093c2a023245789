package idgen

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

const t0 = int64(1700000000000)

// fakeGenerator returns a generator on a fake clock at t0 with a lease of
// slot 5 valid for a minute of fake time.
func fakeGenerator(t *testing.T, cfg Config, minMs int64) (*Generator, *fakeClock, *Lease) {
	t.Helper()
	c := newFakeClock(t0)
	cfg.Clock = c
	l := NewLease(5, minMs, "test", 0, c.Now().Add(time.Minute), math.MaxInt64)
	g, err := New(DefaultLayout(), l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, c, l
}

func mustNext(t *testing.T, g *Generator, shard int) Parts {
	t.Helper()
	id, err := g.Next(context.Background(), shard)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	p, err := g.Layout().Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Shard != shard || p.Slot != 5 {
		t.Fatalf("ID %d decodes to shard %d slot %d, want %d and 5", id, p.Shard, p.Slot, shard)
	}
	return p
}

func TestNextIncreasesPerShard(t *testing.T) {
	g, c, _ := fakeGenerator(t, Config{}, 0)
	last := map[int]int64{}
	for i := range 20000 {
		shard := i % 3
		if i%500 == 0 {
			c.Add(time.Millisecond)
		}
		p := mustNext(t, g, shard)
		if p.ID <= last[shard] {
			t.Fatalf("ID %d on shard %d after %d", p.ID, shard, last[shard])
		}
		last[shard] = p.ID
	}
}

func TestBurstBorrowsThenWaits(t *testing.T) {
	g, c, _ := fakeGenerator(t, Config{}, 0)
	// 16 IDs per ms for 101 ms (the clock's and 100 borrowed) without sleeping.
	for i := range 16 * 101 {
		p := mustNext(t, g, 9)
		if want := t0 + int64(i/16); p.UnixMs != want || p.Counter != i%16 {
			t.Fatalf("ID %d: time %d counter %d, want %d and %d", i, p.UnixMs, p.Counter, want, i%16)
		}
	}
	if c.Slept() != 0 {
		t.Fatalf("slept %v while borrowing", c.Slept())
	}
	p := mustNext(t, g, 9)
	if p.UnixMs != t0+101 || c.Slept() != time.Millisecond {
		t.Fatalf("after the borrow limit: time %d, slept %v; want %d and 1ms", p.UnixMs, c.Slept(), t0+101)
	}
	// Other shards are not held back.
	if p := mustNext(t, g, 10); p.UnixMs != t0+1 {
		t.Fatalf("other shard: time %d, want %d", p.UnixMs, t0+1)
	}
}

func TestNoBorrowing(t *testing.T) {
	g, c, _ := fakeGenerator(t, Config{MaxBorrow: -1}, 0)
	for range 17 {
		mustNext(t, g, 1)
	}
	if c.Slept() != time.Millisecond {
		t.Fatalf("slept %v, want 1ms", c.Slept())
	}
}

func TestClockRegression(t *testing.T) {
	tests := []struct {
		name      string
		back      time.Duration
		wantSleep time.Duration
		wantErr   bool
	}{
		{"within borrow: no wait", 50 * time.Millisecond, 0, false},
		{"waited out", 500 * time.Millisecond, 400 * time.Millisecond, false},
		{"at the limit", time.Second, 900 * time.Millisecond, false},
		{"too far", 2 * time.Second, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, c, _ := fakeGenerator(t, Config{}, 0)
			before := map[int]int64{}
			for s := range 4 {
				before[s] = mustNext(t, g, s).ID
			}
			c.Add(-tt.back)
			for s := range 4 {
				id, err := g.Next(context.Background(), s)
				if tt.wantErr {
					var ce *ClockError
					if !errors.Is(err, ErrClockMovedBackwards) || !errors.As(err, &ce) || ce.Behind != tt.back {
						t.Fatalf("Next after %v back = %d, %v; want a ClockError of %v", tt.back, id, err, tt.back)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Next after %v back: %v", tt.back, err)
				}
				if id <= before[s] {
					t.Fatalf("shard %d: ID %d after %d", s, id, before[s])
				}
			}
			if c.Slept() != tt.wantSleep {
				t.Fatalf("slept %v, want %v", c.Slept(), tt.wantSleep)
			}
			if tt.wantErr {
				// Once the clock is back, IDs resume, still increasing.
				c.Add(tt.back)
				for s := range 4 {
					if p := mustNext(t, g, s); p.ID <= before[s] {
						t.Fatalf("shard %d: ID %d after %d", s, p.ID, before[s])
					}
				}
			}
		})
	}
}

func TestWaitsPastPreviousHolder(t *testing.T) {
	g, c, _ := fakeGenerator(t, Config{}, t0+50)
	p := mustNext(t, g, 3)
	if p.UnixMs != t0+51 || c.Slept() != 51*time.Millisecond {
		t.Fatalf("first ID at %d after sleeping %v; want %d and 51ms", p.UnixMs, c.Slept(), t0+51)
	}

	g, _, _ = fakeGenerator(t, Config{}, t0+5000)
	_, err := g.Next(context.Background(), 3)
	var ce *ClockError
	if !errors.As(err, &ce) || !errors.Is(err, ErrClockMovedBackwards) {
		t.Fatalf("Next 5 s behind the previous holder = %v, want a ClockError", err)
	}
}

func TestLeaseExpiry(t *testing.T) {
	g, c, l := fakeGenerator(t, Config{}, 0)
	l.Extend(c.Now().Add(time.Second), math.MaxInt64)
	mustNext(t, g, 1)
	c.Add(time.Second)
	if _, err := g.Next(context.Background(), 1); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Next after the deadline = %v, want ErrLeaseExpired", err)
	}
	if err := g.Fill(context.Background(), 1, make([]int64, 3)); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Fill after the deadline = %v, want ErrLeaseExpired", err)
	}
	l.Extend(c.Now().Add(time.Second), math.MaxInt64)
	mustNext(t, g, 1)
	l.Revoke()
	if _, err := g.Next(context.Background(), 1); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Next after Revoke = %v, want ErrLeaseExpired", err)
	}
}

func TestLeaseMaxMs(t *testing.T) {
	g, c, l := fakeGenerator(t, Config{}, 0)
	l.Extend(c.Now().Add(time.Second), t0+2) // the catalog recorded t0+2 as the bound
	for range 16 * 3 {
		if p := mustNext(t, g, 1); p.UnixMs > t0+2 {
			t.Fatalf("ID at %d beyond the lease bound %d", p.UnixMs, t0+2)
		}
	}
	// The next would be t0+3: it waits for a renewal that never comes.
	if _, err := g.Next(context.Background(), 1); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("Next beyond the bound = %v, want ErrLeaseExpired", err)
	}
}

func TestFill(t *testing.T) {
	g, c, _ := fakeGenerator(t, Config{}, 0)
	first := mustNext(t, g, 2)
	ids := make([]int64, 50)
	if err := g.Fill(context.Background(), 2, ids); err != nil {
		t.Fatal(err)
	}
	prev := first.ID
	for i, id := range ids {
		p, _ := g.Layout().Decode(id)
		if id <= prev || p.Shard != 2 || p.Slot != 5 {
			t.Fatalf("ids[%d] = %d (%+v) after %d", i, id, p, prev)
		}
		prev = id
	}
	if p, _ := g.Layout().Decode(ids[49]); p.UnixMs != t0+3 || c.Slept() != 0 {
		t.Fatalf("51 IDs end at %d after sleeping %v, want %d and none", p.UnixMs, c.Slept(), t0+3)
	}
	got, err := g.NextN(context.Background(), 2, 2000)
	if err != nil || len(got) != 2000 || got[0] <= prev {
		t.Fatalf("NextN = %d IDs, %v", len(got), err)
	}
	if _, err := g.NextN(context.Background(), 2, -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("NextN(-1) = %v", err)
	}
}

func TestBadShard(t *testing.T) {
	g, _, _ := fakeGenerator(t, Config{}, 0)
	for _, s := range []int{-1, 8192, math.MaxInt} {
		if _, err := g.Next(context.Background(), s); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Next(%d) = %v, want ErrOutOfRange", s, err)
		}
		if err := g.Fill(context.Background(), s, make([]int64, 1)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Fill(%d) = %v, want ErrOutOfRange", s, err)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	lease := func(slot int) *Lease { return NewLease(slot, 0, "t", 0, farFuture, math.MaxInt64) }
	tests := []struct {
		name   string
		layout Layout
		lease  *Lease
	}{
		{"slot 0 is the database's", DefaultLayout(), lease(0)},
		{"slot beyond the slot bits", DefaultLayout(), lease(64)},
		{"nil lease", DefaultLayout(), nil},
		{"invalid layout", Layout{}, lease(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g, err := New(tt.layout, tt.lease, Config{}); err == nil {
				t.Fatalf("New = %v, want an error", g)
			}
		})
	}
}

func TestContextCancelWhileWaiting(t *testing.T) {
	g, _, _ := fakeGenerator(t, Config{}, t0+500)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Next(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context while waiting = %v", err)
	}
}

func TestCloseSealsAndReportsHighWater(t *testing.T) {
	g, _, l := fakeGenerator(t, Config{}, 0)
	var top int64
	for range 40 {
		top = max(top, mustNext(t, g, 7).UnixMs)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.HighWater() != top || g.HighWater() != top {
		t.Fatalf("high water %d / %d, want %d", l.HighWater(), g.HighWater(), top)
	}
	if _, err := g.Next(context.Background(), 7); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
	if _, err := g.Next(context.Background(), 8); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next on an unused shard after Close = %v", err)
	}
}

// TestConcurrent runs many goroutines on a few shards with the real clock
// (run with -race): all IDs are distinct and each goroutine sees its
// shard's IDs increase.
func TestConcurrent(t *testing.T) {
	g, stop, err := Start(context.Background(), DefaultLayout(), StaticLeaser{Slot: 63}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const workers, each = 8, 4000
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			last := map[int]int64{}
			batch := make([]int64, 7)
			for i := 0; i < each; {
				shard := (w + i) % 3
				var got []int64
				if i%5 == 0 {
					if err := g.Fill(context.Background(), shard, batch); err != nil {
						t.Error(err)
						return
					}
					got = batch
				} else {
					id, err := g.Next(context.Background(), shard)
					if err != nil {
						t.Error(err)
						return
					}
					got = []int64{id}
				}
				for _, id := range got {
					if id <= last[shard] {
						t.Errorf("worker %d shard %d: %d after %d", w, shard, id, last[shard])
						return
					}
					last[shard] = id
					out[w] = append(out[w], id)
				}
				i += len(got)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ids := range out {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = true
		}
	}
}

// TestConcurrentWithRegressions runs many goroutines on a fake clock that
// another goroutine steps forward and back (within MaxClockRegression):
// IDs stay unique and increase per shard as each goroutine sees them.
func TestConcurrentWithRegressions(t *testing.T) {
	c := newFakeClock(t0)
	g, err := New(DefaultLayout(), NewLease(9, 0, "t", 0, farFuture, math.MaxInt64), Config{Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var mover sync.WaitGroup
	mover.Go(func() {
		// Each cycle ends where it started plus 9 ms, so no regression
		// exceeds ~330 ms (under MaxClockRegression) however the
		// workers are scheduled; a net backward drift made a stalled
		// worker see seconds of regression on a loaded machine.
		steps := []time.Duration{time.Millisecond, time.Millisecond, -30 * time.Millisecond, 2 * time.Millisecond, -300 * time.Millisecond, 5 * time.Millisecond, 330 * time.Millisecond}
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			c.Add(steps[i%len(steps)])
			time.Sleep(50 * time.Microsecond)
		}
	})
	const workers, each = 8, 3000
	out := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			last := map[int]int64{}
			for i := range each {
				shard := i % 2
				id, err := g.Next(context.Background(), shard)
				if err != nil {
					t.Error(err)
					return
				}
				if id <= last[shard] {
					t.Errorf("worker %d shard %d: %d after %d", w, shard, id, last[shard])
					return
				}
				last[shard] = id
				out[w] = append(out[w], id)
			}
		})
	}
	wg.Wait()
	close(done)
	mover.Wait()
	seen := map[int64]bool{}
	for _, ids := range out {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d IDs, want %d", len(seen), workers*each)
	}
}
