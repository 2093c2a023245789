package rebalance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// The phase gate: a cutover waits for a running copy, a copy waits for a
// waiting cutover (no starving it), and a cutover given up frees the copies.
func TestPhaseGate(t *testing.T) {
	ctx := context.Background()
	g := newPhaseGate()
	endCopy, err := g.heavyStep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	endOther, err := g.heavyStep(ctx) // copies run side by side
	if err != nil {
		t.Fatal(err)
	}

	entered := make(chan func(), 1)
	go func() {
		release, err := g.cutover(ctx)
		if err != nil {
			t.Error(err)
		}
		entered <- release
	}()
	// Once the cutover waits, a new copy waits behind it.
	testkit.Eventually(t, testkit.Wait, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting == 1 })
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := g.heavyStep(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("copy while a cutover waits: err = %v, want the deadline", err)
	}
	endCopy()
	select {
	case <-entered:
		t.Fatal("cutover started while a copy ran")
	default:
	}
	endOther()
	release := <-entered
	if _, err := g.heavyStep(short); err == nil {
		t.Fatal("copy started during a cutover")
	}
	release()
	end, err := g.heavyStep(ctx)
	if err != nil {
		t.Fatalf("copy after the cutover: %v", err)
	}

	// A cutover that gives up waiting lets copies start again.
	gone, cancelGone := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := g.cutover(gone); done <- err }()
	testkit.Eventually(t, testkit.Wait, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting == 1 })
	cancelGone()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled cutover: err = %v", err)
	}
	end2, err := g.heavyStep(ctx)
	if err != nil {
		t.Fatalf("copy after a cancelled cutover: %v", err)
	}
	end()
	end2()
}
