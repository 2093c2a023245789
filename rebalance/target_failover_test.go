package rebalance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// targetFailover is a move of shard 0 from s0 to s1 under plugin writers
// (shards 0 and 1), s1 on a primary with a synchronous standby and
// registered under the DSN naming both hosts.
type targetFailover struct {
	f     *failoverEnv
	a     *ackedWriter
	stop  func()
	first router.Primary
}

func newTargetFailover(t *testing.T) *targetFailover {
	t.Helper()
	ctx := context.Background()
	f := newFailoverEnvOn(t, "s1", 2, false)
	first := f.register(t, f.multi)
	for s := range 2 {
		seedPhotos(t, f.env, s, 2000)
	}
	a := newAckedWriter(t, f.env, []int{0, 1})
	a.w.via = newPluginOps(t, f.env, a.w.r)
	stop := a.run(ctx)
	t.Cleanup(stop)
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 50 })
	return &targetFailover{f: f, a: a, stop: stop, first: first}
}

// promoted records s1's promoted standby, as an HA tool's hook does, and
// waits for the writers to go on.
func (tf *targetFailover) promoted(t *testing.T) {
	t.Helper()
	second := tf.f.register(t, tf.f.multi)
	if second.SystemID != tf.first.SystemID || second.Timeline <= tf.first.Timeline {
		t.Fatalf("recorded %v after the promotion, %v before", second, tf.first)
	}
	n := tf.a.count()
	testkit.Eventually(t, 30*time.Second, func() bool { return tf.a.count() >= n+50 })
}

// TestMoveAcrossTargetFailover: the target s1 of a move runs on a primary
// with a synchronous standby. With plugin writers on, its primary dies
// mid-copy or mid-catch-up; the standby is promoted and recorded. The
// move, resumed, copies again (mid-copy: the copy's transaction died
// with the primary) or goes on from its slot (mid-catch-up), cuts over,
// verifies and completes: every acknowledged write is on the target.
func TestMoveAcrossTargetFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("two failovers of a move's target: not in -short")
	}
	for _, c := range []struct {
		name   string
		at     Step
		copies int32
	}{
		// The copy's transaction on the target dies with its primary:
		// the resume copies again.
		{"mid-copy", stepCopying, 2},
		// The subscription (the standby has it) goes on from the slot
		// on the source, which the target's failover leaves alone.
		{"mid-catch-up", stepCaughtUp, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			tf := newTargetFailover(t)
			var n copies
			killed := false
			// One copy worker: the hook runs after the first of the
			// shard's three tables, so the next one meets the dead
			// primary whatever the timing (with a worker a table, the
			// others could finish first and the copy end whole).
			mv := tf.f.mover(t, Config{CatchUpTimeout: 20 * time.Second, StepTimeout: 2 * time.Minute, CutoverLag: 100 * time.Millisecond, CopyWorkers: 1,
				hook: func(m Move, s Step, done bool) {
					n.saw(s, done)
					if s == c.at && !done && !killed {
						killed = true
						tf.f.failOver(t)
					}
				}})
			if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err == nil {
				t.Fatal("the move went on through its target's failover without stopping")
			} else {
				t.Logf("the move stopped: %v", err)
			}
			tf.promoted(t)
			m, err := mv.Resume(ctx, 0)
			if err != nil {
				t.Fatalf("resume after the target's failover: %v", err)
			}
			if m.State != StateReversible {
				t.Fatalf("resumed move ended %s at %s, want reversible", m.State, m.Step)
			}
			if got := n.n.Load(); got != c.copies {
				t.Errorf("the move copied %d times, want %d", got, c.copies)
			}
			finishResumed(ctx, t, tf.f, mv, tf.a, tf.stop)
			if p := tf.f.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
				t.Errorf("shard 0 placed %+v after complete, want s1 active", p)
			}
		})
	}
}

// TestMoveReversibleAcrossTargetFailover: a move cut over to s1, reverse
// replication keeping s0 current, when s1's primary dies and its
// synchronous standby is promoted and recorded; the writers go on on the
// promoted target. The reverse slot was on the old primary, and no slot
// is synced to the standby (PostgreSQL 15 and 16 cannot): a rollback
// refuses with ErrReverseLost before it fences anything, the move stays
// reversible and is completed. Completed, at once or after the refused
// rollback, the shard is on the target with every acknowledged write.
func TestMoveReversibleAcrossTargetFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("two failovers of a move's target: not in -short")
	}
	for _, end := range []string{"rollback", "complete"} {
		t.Run(end, func(t *testing.T) {
			ctx := context.Background()
			tf := newTargetFailover(t)
			// The lag gate may wait longer than its default minute: on a
			// loaded machine (make test's other versions beside its race
			// stage), the target's apply of this move was once seen
			// making no progress for a minute before the fence, on
			// PostgreSQL 17, 1 run in 4 (cause not found yet; the move
			// refused to fence, as it must).
			mv := tf.f.mover(t, Config{StepTimeout: 4 * time.Minute, CatchUpTimeout: 3 * time.Minute, GateTimeout: 3 * time.Minute, CutoverLag: 100 * time.Millisecond})
			m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.State != StateReversible {
				t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
			}
			before := tf.a.count()
			testkit.Eventually(t, 30*time.Second, func() bool { return tf.a.count() >= before+50 }) // on the target
			tf.f.failOver(t)
			tf.promoted(t)
			switch end {
			case "rollback":
				// The reverse slot was on the old primary, and PostgreSQL
				// 15 syncs no slot to a standby: the rollback refuses
				// before it fences anything, and the move is completed.
				m, err = mv.Rollback(ctx, 0)
				if !errors.Is(err, ErrReverseLost) {
					t.Fatalf("rollback after the target's failover: %v (ended %s at %s), want ErrReverseLost", err, m.State, m.Step)
				}
				t.Logf("rollback refused: %v", err)
				if m.State != StateReversible {
					t.Errorf("move %s at %s after the refused rollback, want reversible", m.State, m.Step)
				}
				if p := tf.f.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
					t.Errorf("shard 0 placed %+v after the refused rollback, want s1 active", p)
				}
				n := tf.a.count()
				testkit.Eventually(t, 30*time.Second, func() bool { return tf.a.count() >= n+50 })
				if m, err = mv.Complete(ctx, 0); err != nil {
					t.Fatalf("complete after the refused rollback: %v", err)
				}
			case "complete":
				if m, err = mv.Complete(ctx, 0); err != nil {
					t.Fatalf("complete after the target's failover: %v", err)
				}
			}
			// Writes after the end of the move, on the shard's home.
			n := tf.a.count()
			testkit.Eventually(t, 30*time.Second, func() bool { return tf.a.count() >= n+20 })
			tf.stop()
			tf.a.check(t, tf.f.pools)
			if p := tf.f.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
				t.Errorf("shard 0 placed %+v after %s, want s1 active", p, end)
			}
			if left := tf.f.leftoversOf(t, 0); len(left) > 0 {
				t.Errorf("left after %s: %v", end, left)
			}
		})
	}
}

// TestMoveRollsBackAcrossTargetFailoverWithSyncedSlot (PostgreSQL 17+):
// s1's standby syncs failover slots. A move cut over to s1 makes its
// reverse slot there; once the standby holds a copy of it ready for
// failover, s1's primary dies, the standby is promoted and recorded, and
// the writers go on on the promoted target. The rollback keeps the
// synced slot: the shard goes back to s0 with every acknowledged write,
// those the target took before and after its failover included.
func TestMoveRollsBackAcrossTargetFailoverWithSyncedSlot(t *testing.T) {
	ctx := context.Background()
	if v, err := pgtest.Set(t).Clusters[0].VersionNum(ctx); err != nil {
		t.Fatal(err)
	} else if v < 170000 {
		t.Skipf("needs PostgreSQL 17+ for failover slots (the server is %d): "+
			"SHARDKIT_PG_BIN=$(go run ./internal/harness/pglocal/cmd/pgbin 17) go test -run %s ./rebalance", v, t.Name())
	}
	f := newFailoverEnvOn(t, "s1", 2, true)
	first := f.register(t, f.multi)
	for s := range 2 {
		seedPhotos(t, f.env, s, 2000)
	}
	a := newAckedWriter(t, f.env, []int{0, 1})
	a.w.via = newPluginOps(t, f.env, a.w.r)
	stop := a.run(ctx)
	t.Cleanup(stop)
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 50 })
	tf := &targetFailover{f: f, a: a, stop: stop, first: first}

	// The lag gate may wait 3 minutes: see TestMoveReversibleAcrossTargetFailover.
	mv := f.mover(t, Config{StepTimeout: 4 * time.Minute, CatchUpTimeout: 3 * time.Minute, GateTimeout: 3 * time.Minute, CutoverLag: 100 * time.Millisecond})
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateReversible {
		t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
	}
	n, err := moveNames(m)
	if err != nil {
		t.Fatal(err)
	}
	before := a.count()
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= before+50 }) // on the target
	f.slotReady(t, n.rev)
	f.failOver(t)
	tf.promoted(t)
	m, err = mv.Rollback(ctx, 0)
	if err != nil {
		t.Fatalf("rollback after the target's failover with its reverse slot synced: %v", err)
	}
	if m.State != StateRolledBack {
		t.Fatalf("rollback ended %s at %s, want rolled back", m.State, m.Step)
	}
	// Writes after the rollback, on the shard's old home again.
	acked := a.count()
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= acked+20 })
	stop()
	a.check(t, f.pools)
	if p := f.placement(t, 0); p.Server != "s0" || p.State != router.StateActive {
		t.Errorf("shard 0 placed %+v after the rollback, want s0 active", p)
	}
	if left := f.leftoversOf(t, 0); len(left) > 0 {
		t.Errorf("left after the rollback: %v", left)
	}
}
