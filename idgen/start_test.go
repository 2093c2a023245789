package idgen

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// memLeaser is an in-memory Leaser for testing the renew loop: it hands
// out slots in turn and can be told to report the lease lost.
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
	return NewLease(m.next, 0, "mem", 30*time.Millisecond, time.Now().Add(25*time.Millisecond), math.MaxInt64), nil
}

func (m *memLeaser) Renew(_ context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lose {
		m.lose = false
		return ErrLeaseLost
	}
	m.renews++
	l.Extend(time.Now().Add(25*time.Millisecond), math.MaxInt64)
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
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		id, err := g.Next(context.Background(), 4)
		if err != nil {
			t.Fatalf("Next while the lease is renewed: %v", err)
		}
		top = max(top, g.Layout().UnixMsOf(id))
		time.Sleep(time.Millisecond)
	}
	m.mu.Lock()
	renews := m.renews
	m.lose = true
	m.mu.Unlock()
	if renews < 3 {
		t.Fatalf("%d renewals in 300ms with a 30ms TTL", renews)
	}
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
