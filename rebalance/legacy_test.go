package rebalance

import (
	"context"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/migrations"
)

// TestResumeMoveJournalledByCopyingSubscription resumes moves left by a
// mover of the earlier design, whose subscription copied the rows
// (copy_data = true) into a target that had its primary keys: one stopped
// while that copy ran (journal at StepSubscription), one stopped after it
// and its index build (journal at StepIndexes, subscription streaming).
// The first is copied again from a new slot, the second goes on with its
// subscription; under writers, nothing is lost or doubled, both copies
// verify equal, and nothing is left behind.
func TestResumeMoveJournalledByCopyingSubscription(t *testing.T) {
	if testing.Short() {
		t.Skip("kills mover processes (their concurrency is between processes; the first make test stage runs it)")
	}
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2) // shard 0 on s0, shard 1 on s1
	seedPhotos(t, e, 0, 3000)
	mv := e.mover(t, Config{})
	seeded := seededPhotos(t, e)
	w := newRawWriter(t, e, []int{0, 1})
	w.bound = time.Minute
	stop := w.run(ctx)
	defer stop()
	for _, legacy := range []Step{StepSubscription, StepIndexes} {
		from := e.placement(t, 0).Server
		to := map[string]string{"s0": "s1", "s1": "s0"}[from]
		// The new mover up to its publication, then the old one's steps.
		runChild(t, e, "move", 0, to, StepPublication, true)
		m, err := mv.j.open(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := moveNames(m)
		if err != nil {
			t.Fatal(err)
		}
		tgt := e.pools[to]
		onTarget := func(sql string) {
			t.Helper()
			if _, err := tgt.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %s: %v", legacy, sql, err)
			}
		}
		onTarget(`ALTER TABLE shard_0000.photos ADD PRIMARY KEY (id); ALTER TABLE shard_0000.likes ADD PRIMARY KEY (id)`)
		conninfo, err := pgdsn.Libpq(e.dsnOf(from))
		if err != nil {
			t.Fatal(err)
		}
		var stmt string
		if err := tgt.QueryRow(ctx, `SELECT format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = true, synchronous_commit = on)', $1::text, $2::text, $1::text)`,
			n.fwd, conninfo).Scan(&stmt); err != nil {
			t.Fatal(err)
		}
		onTarget(stmt)
		if err := mv.j.finishStep(ctx, &m, StepSubscription, StepCopied); err != nil {
			t.Fatal(err)
		}
		if legacy == StepIndexes {
			deadline := time.Now().Add(time.Minute)
			for {
				var waiting int
				if err := tgt.QueryRow(ctx, `SELECT count(*) FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid
					WHERE s.subname = $1 AND r.srsubstate <> 'r'`, n.fwd).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the old-style subscription did not finish its copy in a minute")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := migrations.ApplyIndexes(ctx, tgt, e.placementLayout(t), 0, testSQL); err != nil {
				t.Fatal(err)
			}
			if err := mv.j.finishStep(ctx, &m, StepIndexes, StepCaughtUp); err != nil {
				t.Fatal(err)
			}
		}
		if m, err = mv.Resume(ctx, 0); err != nil {
			t.Fatalf("resume a move journalled at %s by the old mover: %v", legacy, err)
		}
		if m.State != StateReversible {
			t.Fatalf("%s: resumed move %d is %s at %s", legacy, m.ID, m.State, m.Step)
		}
		resume := w.hold() // Verify compares copies at rest
		if _, err := mv.Verify(ctx, 0); err != nil {
			t.Errorf("%s: verify: %v", legacy, err)
		}
		resume()
		if got := seededPhotos(t, e); got != seeded {
			t.Errorf("%s: %d seeded photos on the new home, want %d", legacy, got, seeded)
		}
		if _, err := mv.Complete(ctx, 0); err != nil {
			t.Fatalf("%s: complete: %v", legacy, err)
		}
		if p := e.placement(t, 0); p.Server != to {
			t.Fatalf("%s: shard 0 on %s, want %s", legacy, p.Server, to)
		}
		if left := e.leftovers(t); len(left) > 0 {
			t.Errorf("%s: left behind: %v", legacy, left)
		}
	}
	stop()
	w.check(t)
	t.Logf("writer: %d ops, %d failed, longest write %v", w.ops, len(w.failures), w.maxWait)
}

// seededPhotos counts the photos of shard 0 that the writer did not write.
func seededPhotos(t *testing.T, e *env) int64 {
	t.Helper()
	var n int64
	if err := e.pools[e.placement(t, 0).Server].QueryRow(context.Background(),
		`SELECT count(*) FROM shard_0000.photos WHERE caption NOT LIKE 'photo %'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// dsnOf returns a server's DSN.
func (e *env) dsnOf(server string) string {
	for _, s := range e.servers {
		if s.Name == server {
			return s.DSN
		}
	}
	return ""
}
