package rebalance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestMoveDrainsBehindASynchronousStandby: the target s1 of a move has a
// synchronous standby. A session on the target holds a SHARE lock on the
// shard's table from the moment the move catches up, under plugin writers,
// until a backlog of some hundred transactions has built; then the lock
// and the writers go. The subscription's worker applies the backlog one
// transaction at a time, each commit waiting for the standby (SyncRep),
// and on PostgreSQL 16+ the target's walsender can sleep through the flush
// of the next one (nudge.go) until something else wakes it, about 10 s
// later. The move must end reversible within a bound that such a sleep,
// left alone, exceeds: the move's nudges wake the walsender. Without them,
// 2 of 13 runs on 17 (beside another test's stress loop) met a sleep and
// took 10.3 and 11.0 s.
func TestMoveDrainsBehindASynchronousStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("a move whose target's synchronous standby paces its apply: not in -short")
	}
	ctx := context.Background()
	tf := newTargetFailover(t)
	var logged testkit.SyncBuffer
	lm := startLockedMove(t, tf, &logged)
	// A backlog of some hundred transactions on the shard. The writers
	// stop with the lock: the drain is the worker's, at the standby's
	// pace, and not a race with writers that a loaded machine can lose.
	n := tf.a.count()
	testkit.Eventually(t, time.Minute, func() bool { return tf.a.count() >= n+600 })
	if err := lm.lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	tf.stop()
	// The bound: applied at the standby's pace, the backlog took 0.15–0.75
	// s, at load 3 to 6 and with three busy loops beside alike; each sleep
	// through a flush that nothing woke cost about 10 s (10.3 and 11.0 s
	// in the runs that met one).
	const bound = 8 * time.Second
	select {
	case err := <-lm.done:
		if err != nil {
			t.Fatalf("move after the lock went: %v\n%s", err, logged.String())
		}
	case <-time.After(bound):
		t.Fatalf("the move did not end within %v of the lock's release\n%s", bound, logged.String())
	}
	took := time.Since(released)
	if m := lm.m; m.State != StateReversible {
		t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
	}
	woke := strings.Count(logged.String(), "woke a server's walsenders")
	t.Logf("the move ended %v after the lock went, %d writes acknowledged under the lock; nudges logged: %d", took.Round(time.Millisecond), tf.a.count()-n, woke)
	if testing.Verbose() {
		t.Logf("the move's log:\n%s", logged.String())
	}
	tf.a.check(t, tf.f.pools)
}
