package rebalance

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestMoveReportsAStalledTarget: with plugin writers on the shard, a
// session on the target holds a SHARE lock on the shard's photos table
// from the moment the move catches up, so the subscription's worker waits
// on it and applies nothing. The move's lag gate logs the stall with what
// the worker waits on (Lock:relation) and the source's walsender; once the
// lock and the writers go, the move fences and ends reversible with every
// acknowledged write on the target.
func TestMoveReportsAStalledTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("a move whose target stops applying for a while: not in -short")
	}
	ctx := context.Background()
	tf := newTargetFailover(t)
	var logged testkit.SyncBuffer
	lm := startLockedMove(t, tf, &logged)
	const stall = "the move's target has applied nothing while behind its source"
	testkit.Eventually(t, 2*time.Minute, func() bool { return strings.Contains(logged.String(), stall) })
	if err := lm.lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The writers stop, so that the backlog drains: each transaction the
	// worker applies waits for the target's synchronous standby, and on a
	// loaded machine that pace was seen to only match the writers' (17).
	tf.stop()
	if err := <-lm.done; err != nil {
		t.Fatalf("move after the lock went: %v\n%s", err, logged.String())
	}
	if m := lm.m; m.State != StateReversible {
		t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
	}
	var line string
	for l := range strings.Lines(logged.String()) {
		if strings.Contains(l, stall) {
			line = l
			break
		}
	}
	t.Logf("logged: %s", line)
	if testing.Verbose() {
		t.Logf("the move's log:\n%s", logged.String())
	}
	for _, want := range []string{"apply worker pid", "waits on Lock:relation", "walsender pid", "synchronous_standby_names"} {
		if !strings.Contains(line, want) {
			t.Errorf("the stall's log line does not say %q: %s", want, line)
		}
	}
	tf.a.check(t, tf.f.pools)
}

// lockedMove is a move of shard 0 to s1 whose target's photos table a
// session holds a SHARE lock on, taken as the move caught up: its worker
// applies nothing until the lock goes.
type lockedMove struct {
	lock pgx.Tx
	done chan error // the move's error, once it ended; m is set before
	m    Move
}

// startLockedMove starts a lockedMove, logging into logged, and returns
// once the lock is held.
func startLockedMove(t *testing.T, tf *targetFailover, logged *testkit.SyncBuffer) *lockedMove {
	t.Helper()
	ctx := context.Background()
	lm := &lockedMove{done: make(chan error, 1)}
	var once sync.Once
	locked := make(chan struct{})
	holder := pgtest.Connect(t, tf.f.primary.DSN(tf.f.db))
	mv := tf.f.mover(t, Config{
		Logger:         slog.New(slog.NewTextHandler(logged, nil)),
		CatchUpTimeout: 3 * time.Minute, GateTimeout: 3 * time.Minute, StepTimeout: 4 * time.Minute,
		Progress: func(p Progress) {
			if p.Phase != "catchup" {
				return
			}
			once.Do(func() {
				defer close(locked)
				var err error
				if lm.lock, err = holder.Begin(ctx); err == nil {
					_, err = lm.lock.Exec(ctx, `LOCK TABLE shard_0000.photos IN SHARE MODE`)
				}
				if err != nil {
					t.Errorf("lock the target's table: %v", err)
				}
			})
		},
	})
	go func() {
		m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
		lm.m = m
		lm.done <- err
	}()
	select {
	case <-locked:
	case err := <-lm.done:
		t.Fatalf("the move ended (%v) before it caught up", err)
	}
	return lm
}
