package idgen

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// memLeaser is an in-memory Leaser for testing the renew loop: it hands
// out slots in turn, can be told to report the lease lost, or to fail
// renewals as an unreachable catalog would.
type memLeaser struct {
	mu       sync.Mutex
	ttl      time.Duration // lease TTL; the local deadline is 5/6 of it
	next     int
	acquires int
	renews   int
	failed   int // renewals refused while down
	lose     bool
	down     bool
	release  []int64
}

var errUnreachable = errors.New("catalog unreachable")

func (m *memLeaser) window() time.Time { return time.Now().Add(m.ttl * 5 / 6) }

func (m *memLeaser) Acquire(context.Context) (*Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, errUnreachable
	}
	m.next++
	m.acquires++
	return NewLease(m.next, 0, "mem", m.ttl, m.window(), math.MaxInt64), nil
}

func (m *memLeaser) Renew(_ context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		m.failed++
		return errUnreachable
	}
	if m.lose {
		m.lose = false
		return ErrLeaseLost
	}
	m.renews++
	l.Extend(m.window(), math.MaxInt64)
	return nil
}

func (m *memLeaser) Release(_ context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release = append(m.release, l.HighWater())
	return nil
}

// get reads a field of m under its lock.
func (m *memLeaser) get(f func(*memLeaser) int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f(m)
}

// waitUntil polls cond (conditions, not timings: the machine may be loaded).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 30s", what)
		}
	}
}

func TestStartRenewsAndReleases(t *testing.T) {
	// A TTL long enough that a loaded machine renews in time, short
	// enough that renewals come quickly.
	m := &memLeaser{ttl: 300 * time.Millisecond}
	g, stop, err := Start(context.Background(), DefaultLayout(), m, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var top int64
	for m.get(func(m *memLeaser) int { return m.renews }) < 3 {
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
	waitUntil(t, "new lease after ErrLeaseLost", func() bool { return g.Lease().Slot != 1 })
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

// TestRenewResumesTheSlotAfterAnOutage: while the leaser cannot be reached
// the lease passes its deadline and Next refuses with ErrLeaseExpired (the
// caller's cue to use the database's next_id()); when the leaser answers
// again the same slot is renewed, not a new one leased, and IDs resume in
// it, above every ID issued before.
func TestRenewResumesTheSlotAfterAnOutage(t *testing.T) {
	m := &memLeaser{ttl: 120 * time.Millisecond}
	g, stop, err := Start(context.Background(), DefaultLayout(), m, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	before, err := g.Next(context.Background(), 9)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.down = true
	m.mu.Unlock()
	var expired error
	waitUntil(t, "ErrLeaseExpired during the outage", func() bool {
		_, expired = g.Next(context.Background(), 9)
		return expired != nil
	})
	if !errors.Is(expired, ErrLeaseExpired) {
		t.Fatalf("Next during the outage: %v, want ErrLeaseExpired", expired)
	}
	// Renewals keep being tried past the deadline.
	n := m.get(func(m *memLeaser) int { return m.failed })
	waitUntil(t, "renewal attempt after the deadline", func() bool { return m.get(func(m *memLeaser) int { return m.failed }) > n })
	m.mu.Lock()
	m.down = false
	m.mu.Unlock()
	var after int64
	waitUntil(t, "ID after the outage", func() bool {
		after, err = g.Next(context.Background(), 9)
		return err == nil
	})
	p, _ := g.Layout().Decode(after)
	if p.Slot != 1 || g.Lease().Slot != 1 {
		t.Fatalf("slot %d (lease %d) after the outage, want slot 1 again", p.Slot, g.Lease().Slot)
	}
	if after <= before {
		t.Fatalf("ID %d after the outage is not above %d from before it", after, before)
	}
	if a := m.get(func(m *memLeaser) int { return m.acquires }); a != 1 {
		t.Fatalf("%d acquisitions, want 1 (the slot is renewed, not leased again)", a)
	}
}
