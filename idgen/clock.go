package idgen

import (
	"context"
	"time"
)

// Clock is the source of time for a Generator and for lease holders. The
// zero Config uses the system clock; tests inject a fake one to simulate
// bursts, clock regressions and lease expiry without waiting.
type Clock interface {
	// Now returns the current time. Lease deadlines are compared with
	// time.Time.Before, so times carrying a monotonic reading (as time.Now
	// returns) make deadlines immune to steps of the wall clock.
	Now() time.Time
	// Sleep waits for d, or until ctx ends and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the real clock: time.Now and a timer.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
