package rebalance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/router"
)

// TestCutoverWaitsForPreparedTransactions: a transaction prepared on the
// source with a write to the shard (what an atomic transaction's part is
// between its PREPARE and its COMMIT PREPARED) keeps the cutover from
// starting; the move is refused with ErrPreparedTransactions before the
// fence, the shard stays where it is, and once the transaction commits a
// resume completes the move with its row.
func TestCutoverWaitsForPreparedTransactions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2)
	seedPhotos(t, e, 0, 50)
	defer func(d time.Duration) { preparedWait = d }(preparedWait)
	preparedWait = 200 * time.Millisecond
	const gid = `shardkit:v1:s0:1:0123456789abcdef:1`
	prepare := func() error {
		_, err := e.pools["s0"].Exec(ctx, `BEGIN; INSERT INTO shard_0000.photos (user_id) VALUES (0); PREPARE TRANSACTION '`+gid+`'`)
		return err
	}
	t.Cleanup(func() { _, _ = e.pools["s0"].Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`) })

	// Preflight reports it.
	if err := prepare(); err != nil {
		t.Fatal(err)
	}
	mv := e.mover(t, Config{})
	r, err := mv.Preflight(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range r.Checks {
		if c.Name == checkPrepared {
			found = c.Err == nil && strings.Contains(c.Detail, "1 prepared on the shard now")
		}
	}
	if !found {
		t.Fatalf("preflight checks %+v lack a passing %q that reports the prepared transaction", r.Checks, checkPrepared)
	}
	// A logical replication slot cannot be created while a transaction is
	// prepared (it waits for it), so the copy starts without one; the
	// transaction prepares once the copy is done, before the cutover.
	if _, err := e.pools["s0"].Exec(ctx, `ROLLBACK PREPARED '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	mv = e.mover(t, Config{hook: func(m Move, s Step, done bool) {
		if s == stepReverseSlot && done {
			if err := prepare(); err != nil {
				t.Error(err)
			}
		}
	}})
	if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); !errors.Is(err, ErrPreparedTransactions) || !strings.Contains(err.Error(), gid) {
		t.Fatalf("move with a prepared transaction on the shard: err = %v, want ErrPreparedTransactions naming %s", err, gid)
	}
	if p := e.placement(t, 0); p.Server != "s0" || p.State == router.StateFenced {
		t.Fatalf("shard 0 placed %+v after the refused cutover, want s0, not fenced", p)
	}
	if _, err := e.pools["s0"].Exec(ctx, `COMMIT PREPARED '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	if _, err := mv.Resume(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if p := e.placement(t, 0); p.Server != "s1" {
		t.Fatalf("shard 0 placed %+v, want s1", p)
	}
	var n int
	if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM shard_0000.photos`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 51 {
		t.Fatalf("%d rows on the target, want the 50 seeded and the prepared one", n)
	}
}
