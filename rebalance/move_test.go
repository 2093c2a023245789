package rebalance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/router"
)

func seedPhotos(t testing.TB, e *env, shard, n int) {
	t.Helper()
	p := e.placement(t, shard)
	_, err := e.pools[p.Server].Exec(context.Background(),
		`INSERT INTO `+ident(p.Schema, "photos")+` (user_id, caption) SELECT $1::bigint, 'seed' FROM generate_series(1, $2::int) g`,
		shard, n)
	if err != nil {
		t.Fatal(err)
	}
}

func seqValue(t *testing.T, e *env, server string, shard int) int64 {
	t.Helper()
	var v int64
	err := e.pools[server].QueryRow(context.Background(), `SELECT last_value FROM `+ident(router.SchemaName(shard), "id_seq")).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOnlineMoveWithWriters(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shards 0,1 on s0; 2,3 on s1
	for s := range 4 {
		seedPhotos(t, e, s, 2000)
	}
	mv := e.mover(t, Config{})
	w := newRawWriter(t, e, []int{0, 1, 2})
	stop := w.run(ctx)
	time.Sleep(300 * time.Millisecond)

	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	if m.State != StateReversible || m.Step != stepReverse {
		t.Errorf("move ended %s at %s, want reversible at %s", m.State, m.Step, stepReverse)
	}
	if p := e.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
		t.Errorf("shard 0 placed %+v, want s1 active", p)
	}
	time.Sleep(300 * time.Millisecond)
	// A router with a stale map writing to the old home is refused.
	_, err = e.pools["s0"].Exec(ctx, `INSERT INTO shard_0000.photos (user_id) VALUES (0)`)
	if !router.IsFenceError(err) {
		t.Errorf("write to the old home: err = %v, want SQLSTATE %s", err, router.FenceSQLState)
	}
	stop()
	w.check(t)
	t.Logf("move %d: fenced %v; writer: %d ops, longest write %v", m.ID, m.FencedFor, w.ops, w.maxWait)

	sums, err := mv.Verify(ctx, 0)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	for _, s := range sums {
		if s.SourceRows == 0 && s.Table == "photos" {
			t.Errorf("verify compared empty photos tables")
		}
	}
	// The target's sequence continues the source's.
	if src, tgt := seqValue(t, e, "s0", 0), seqValue(t, e, "s1", 0); tgt <= src {
		t.Errorf("target id_seq %d not past the source's %d", tgt, src)
	}
	var maxOld, newID int64
	if err := e.pools["s1"].QueryRow(ctx, `SELECT max(id) FROM shard_0000.photos`).Scan(&maxOld); err != nil {
		t.Fatal(err)
	}
	if err := e.pools["s1"].QueryRow(ctx, `INSERT INTO shard_0000.photos (user_id) VALUES (0) RETURNING id`).Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID <= maxOld {
		t.Errorf("next_id on the target %d not above the newest id %d", newID, maxOld)
	}

	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left after complete: %v", left)
	}
	if e.schemaOn(t, "s0", 0) {
		t.Error("old schema still on s0 after complete")
	}
	if _, err := mv.Complete(ctx, 0); !errors.Is(err, errNoMove) {
		t.Errorf("second complete: err = %v, want errNoMove", err)
	}
}

// TestSequencesCarriedBeforeTheFence moves two shards. The cutover carries
// the sequences to the target before the fence, twice the margin ahead:
// shard 1, quiet, needs no carry in the window; shard 0 draws more than
// the margin from its sequence between that carry and the fence, so the
// window carries the final values again. Either way the target's sequence
// ends at least the margin past the source's final value.
func TestSequencesCarriedBeforeTheFence(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shards 0,1 on s0
	const margin = 100
	seq := func(shard int) string { return ident(router.SchemaName(shard), "id_seq") }
	var bumped int64
	mv := e.mover(t, Config{SequenceMargin: margin, hook: func(m Move, s Step, done bool) {
		if m.Shard == 0 && s == stepFenced && !done && bumped == 0 {
			if err := e.pools["s0"].QueryRow(ctx, `SELECT setval($1::regclass, last_value + 3*$2) FROM `+seq(0), seq(0), margin).Scan(&bumped); err != nil {
				t.Error(err)
			}
		}
	}})
	for _, c := range []struct {
		shard    int
		inWindow bool
	}{{1, false}, {0, true}} {
		seedPhotos(t, e, c.shard, 50)
		m, err := mv.Move(ctx, c.shard, "s1", MoveOptions{})
		if err != nil {
			t.Fatalf("move shard %d: %v", c.shard, err)
		}
		if m.Cutover.CarriedInWindow != c.inWindow {
			t.Errorf("shard %d: carried in the window %v, want %v (%s)", c.shard, m.Cutover.CarriedInWindow, c.inWindow, m.Cutover)
		}
		src, tgt := seqValue(t, e, "s0", c.shard), seqValue(t, e, "s1", c.shard)
		if tgt < src+margin {
			t.Errorf("shard %d: target id_seq %d, want at least the source's %d plus the margin %d", c.shard, tgt, src, margin)
		}
		if m.SeqValue < tgt {
			t.Errorf("shard %d: journal's sequence value %d below the target's %d", c.shard, m.SeqValue, tgt)
		}
		j, err := mv.j.open(ctx, c.shard)
		if err != nil {
			t.Fatal(err)
		}
		if j.Cutover.CarriedInWindow != c.inWindow || j.Cutover.Precarry == 0 {
			t.Errorf("shard %d: journal's cutover %+v, want carried in the window %v and the carry before the fence timed", c.shard, j.Cutover, c.inWindow)
		}
	}
	if bumped == 0 {
		t.Error("the hook never drew from shard 0's sequence")
	}
}

func TestRollbackAfterCutover(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4)
	seedPhotos(t, e, 1, 1000)
	mv := e.mover(t, Config{})
	w := newRawWriter(t, e, []int{1, 3})
	stop := w.run(ctx)
	time.Sleep(200 * time.Millisecond)
	if _, err := mv.Move(ctx, 1, "s1", MoveOptions{}); err != nil {
		stop()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	m, err := mv.Rollback(ctx, 1)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	w.check(t)
	if m.State != StateRolledBack {
		t.Errorf("state %s, want rolled_back", m.State)
	}
	if p := e.placement(t, 1); p.Server != "s0" || p.State != router.StateActive {
		t.Errorf("shard 1 placed %+v, want s0 active", p)
	}
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left after rollback: %v", left)
	}
	if e.schemaOn(t, "s1", 1) {
		t.Error("schema still on s1 after rollback")
	}
	t.Logf("rollback fenced %v; writer %d ops, longest write %v", m.FencedFor, w.ops, w.maxWait)
	// The source takes writes again, with IDs above everything the target made.
	var maxOld, newID int64
	if err := e.pools["s0"].QueryRow(ctx, `SELECT max(id) FROM shard_0001.photos`).Scan(&maxOld); err != nil {
		t.Fatal(err)
	}
	if err := e.pools["s0"].QueryRow(ctx, `INSERT INTO shard_0001.photos (user_id) VALUES (1) RETURNING id`).Scan(&newID); err != nil {
		t.Fatal(err)
	}
	if newID <= maxOld {
		t.Errorf("next_id after rollback %d not above the newest id %d", newID, maxOld)
	}
}

// TestCutoverTimeoutAborts stops the subscription just before the fence:
// the target never confirms the final LSN, so the cutover aborts (barrier
// removed, shard unfenced, writes go on at the source); a resume then
// completes the move.
func TestCutoverTimeoutAborts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2)
	seedPhotos(t, e, 0, 500)
	var sub string
	mv := e.mover(t, Config{CutoverTimeout: 300 * time.Millisecond, hook: func(m Move, s Step, done bool) {
		if s == stepFenced && !done && sub == "" {
			n, _ := moveNames(m)
			sub = n.fwd
			if _, err := e.pools["s1"].Exec(ctx, `ALTER SUBSCRIPTION `+ident(sub)+` DISABLE`); err != nil {
				t.Error(err)
			}
			// DISABLE stops the apply worker asynchronously; on a busy
			// machine it could still confirm the final LSN. Wait until
			// it is gone, so the target surely never confirms.
			deadline := time.Now().Add(60 * time.Second)
			for {
				var workers int
				if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM pg_stat_subscription WHERE subname = $1 AND pid IS NOT NULL`, sub).Scan(&workers); err != nil {
					t.Error(err)
					break
				}
				if workers == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond) // poll the condition
			}
		}
	}})
	w := newRawWriter(t, e, []int{0})
	stop := w.run(ctx)
	defer stop()
	_, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if !errors.Is(err, errCutoverTimeout) {
		t.Fatalf("err = %v, want errCutoverTimeout", err)
	}
	// The subscription is disabled: the error says its consumer is gone.
	if !strings.Contains(err.Error(), "consumer connected false") {
		t.Errorf("err = %v, want the slot's state", err)
	}
	if p := e.placement(t, 0); p.Server != "s0" || p.State != router.StateMoving {
		t.Errorf("after the abort shard 0 is %+v, want s0 moving", p)
	}
	time.Sleep(200 * time.Millisecond) // writes go on at the source
	if _, err := e.pools["s0"].Exec(ctx, `INSERT INTO shard_0000.photos (user_id) VALUES (2)`); err != nil {
		t.Errorf("source refuses writes after the abort: %v", err)
	}
	open, err := mv.j.open(ctx, 0)
	if err != nil || open.Step != stepCaughtUp || open.Error == "" {
		t.Errorf("journal after the abort: %+v, %v; want step caught_up with the error", open, err)
	}
	if _, err := e.pools["s1"].Exec(ctx, `ALTER SUBSCRIPTION `+ident(sub)+` ENABLE`); err != nil {
		t.Fatal(err)
	}
	m, err := mv.Resume(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	stop()
	w.check(t)
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	t.Logf("resumed move %d fenced %v", m.ID, m.FencedFor)
}
