package idgen

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// memLeaser is an in-memory Leaser for testing the renew loop: it hands
// out slots in turn and can be told to report the lease lost. Its leases
// last 300 ms (local deadline 250 ms), renewed every 100 ms: short enough
// for a test, long enough for a loaded machine's scheduling delays.
const memTTL, memDeadline = 300 * time.Millisecond, 250 * time.Millisecond

type memLeaser struct {
	mu      sync.Mutex
	next    int
	renews  int
	lose    bool
	release []int64
}

func (m *memLeaser) Acquire(context.Context) (*Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	return NewLease(m.next, 0, "mem", memTTL, time.Now().Add(memDeadline), math.MaxInt64), nil
}

func (m *memLeaser) Renew(_ context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lose {
		m.lose = false
		return ErrLeaseLost
	}
	m.renews++
	l.Extend(time.Now().Add(memDeadline), math.MaxInt64)
	return nil
}

func (m *memLeaser) Release(_ context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release = append(m.release, l.HighWater())
	return nil
}

func TestStartRenewsAndReleases(t *testing.T) {
	m := &memLeaser{}
	g, stop, err := Start(context.Background(), DefaultLayout(), m, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var top int64
	renews := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.renews
	}
	// Issue IDs through three renewals: each lease lasts less than that.
	for start := time.Now(); renews() < 3; {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d renewals in 30s with a %v TTL", renews(), memTTL)
		}
		id, err := g.Next(context.Background(), 4)
		if err != nil {
			t.Fatalf("Next while the lease is renewed: %v", err)
		}
		top = max(top, g.Layout().UnixMsOf(id))
		time.Sleep(time.Millisecond)
	}
	m.mu.Lock()
	m.lose = true
	m.mu.Unlock()
	// The next renewal reports the lease lost: the generator leases slot 2.
	for start := time.Now(); g.Lease().Slot == 1; time.Sleep(time.Millisecond) {
		if time.Since(start) > 2*time.Second {
			t.Fatal("no new lease after ErrLeaseLost")
		}
	}
	id, err := g.Next(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := g.Layout().Decode(id); p.Slot != 2 {
		t.Fatalf("slot %d after the lease was lost, want 2", p.Slot)
	}
	top = max(top, g.Layout().UnixMsOf(id))
	stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.release) != 1 || m.release[0] != top {
		t.Fatalf("released with high water %v, want [%d]", m.release, top)
	}
}
