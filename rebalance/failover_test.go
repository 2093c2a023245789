package rebalance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// failoverEnv is an env of two servers, s0 holding every shard and s1
// empty (moves go from s0 to s1), one of which (server: s0, the source,
// unless newFailoverEnvOn says s1, the target) runs on a primary of its
// own with a synchronous standby, the other on a shared cluster. The
// env's pools (the test's writers and checks) reach it through one DSN
// naming both hosts with target_session_attrs=read-write, so they follow
// the failover; the catalog registers it as the test asks (register).
type failoverEnv struct {
	*env
	server           string // the server on the primary and its standby
	primary, standby *pglocal.Cluster
	db               string // its database
	multi            string // the DSN naming both hosts
}

var failoverDBs atomic.Int64

// newFailoverEnv starts s0's primary and its standby (syncing failover
// slots when slotSync: PostgreSQL 17+) and provisions shards shards on s0.
func newFailoverEnv(t *testing.T, shards int, slotSync bool) *failoverEnv {
	t.Helper()
	return newFailoverEnvOn(t, "s0", shards, slotSync)
}

// newFailoverEnvOn is newFailoverEnv with server (s0 or s1) on the
// primary and its standby; the shards are on s0 either way.
func newFailoverEnvOn(t *testing.T, server string, shards int, slotSync bool) *failoverEnv {
	t.Helper()
	ctx := context.Background()
	tuneShared(t)
	set := pgtest.Set(t)
	retry := map[string]string{"wal_retrieve_retry_interval": "'100ms'"}
	primary, err := set.Add(ctx, pglocal.Options{Settings: retry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	// The database is made before the standby, which then has it; the
	// clusters go when the test ends, the database with them.
	db := fmt.Sprintf("failover_%d", failoverDBs.Add(1))
	pgtest.Exec(t, primary.DSN("postgres"), "CREATE DATABASE "+db)
	standby, err := set.AddStandby(ctx, primary, pglocal.StandbyOptions{Sync: true, SlotSync: slotSync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	// Once promoted, the standby runs the reverse subscription of a
	// move that cut over.
	if err := standby.Configure(ctx, retry); err != nil {
		t.Fatal(err)
	}
	multi := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		primary.Port, standby.Port, db)
	e := newEnvFrom(t, shardtest.Spec{Servers: []string{"s0", "s1"}, Shards: shards, Used: 1, ShardSQL: testSQL,
		DSN: func(s string) string {
			if s == server {
				return multi
			}
			return ""
		}})
	return &failoverEnv{env: e, server: server, primary: primary, standby: standby, db: db, multi: multi}
}

// register sets the server's admin DSN in the catalog and records the
// host that answers on it as its primary, as an HA tool's promotion hook
// does (shardctl server promoted s0).
func (f *failoverEnv) register(t *testing.T, dsn string) router.Primary {
	t.Helper()
	ctx := context.Background()
	if err := f.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, f.server, dsn, "")
	}); err != nil {
		t.Fatal(err)
	}
	got, _, err := f.cat.RecordServerPrimary(ctx, f.server)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// failOver kills the server's primary as a crash would and promotes its
// standby.
func (f *failoverEnv) failOver(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}

// slotReady waits until the standby holds a copy of the primary's slot
// that a promotion keeps (synced, not temporary), as PostgreSQL's
// failover docs have an operator check before a planned switchover.
func (f *failoverEnv) slotReady(t *testing.T, slot string) {
	t.Helper()
	ctx := context.Background()
	sb := pgtest.Connect(t, f.standby.DSN(f.db))
	testkit.Eventually(t, 60*time.Second, func() bool {
		f.standby.SyncSlots(ctx)
		var ready bool
		err := sb.QueryRow(ctx, `SELECT coalesce(bool_or(synced AND NOT temporary), false) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&ready)
		return err == nil && ready
	})
}

// ackedWriter inserts photos into shards through rawWriter's routing
// (the fence honoured, a refusal retried on the new home) until stopped,
// and keeps the IDs the servers acknowledged. A failed insert may have
// happened (its commit lost with the primary's connection): it is
// counted, and the writer goes on after a client's pause.
type ackedWriter struct {
	w      *rawWriter
	mu     sync.Mutex
	acked  map[int64]int // photo id → shard
	failed int
	last   error
}

func newAckedWriter(t *testing.T, e *env, shards []int) *ackedWriter {
	t.Helper()
	w := newRawWriter(t, e, shards)
	w.bound = 10 * time.Second
	return &ackedWriter{w: w, acked: map[int64]int{}}
}

// run writes until the returned stop is called.
func (a *ackedWriter) run(ctx context.Context) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.w.r.Watch(wctx) }()
	for _, shard := range a.w.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil; i++ {
				user := int64(shard + a.w.e.shards*(1+i%50))
				ictx, done := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
				id, err := a.w.insert(ictx, shard, user, fmt.Sprintf("photo %d", i))
				done()
				a.mu.Lock()
				if err == nil {
					a.acked[id] = shard
				} else {
					a.failed++
					a.last = err
				}
				a.mu.Unlock()
				pause := 5 * time.Millisecond
				if err != nil {
					pause = 20 * time.Millisecond
				}
				time.Sleep(pause)
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// count is the number of acknowledged writes so far.
func (a *ackedWriter) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// check fails the test unless every acknowledged photo is in its shard
// on the shard's home (read through pools, by server name), once; rows
// beyond them can only be failed writes that happened.
func (a *ackedWriter) check(t *testing.T, pools map[string]*pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, shard := range a.w.shards {
		p := a.w.e.placement(t, shard)
		rows, err := pools[p.Server].Query(ctx, `SELECT id FROM `+ident(p.Schema, "photos")+` WHERE caption LIKE 'photo %'`)
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]int{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			have[id]++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		acked, lost := 0, 0
		for id, s := range a.acked {
			if s != shard {
				continue
			}
			acked++
			if have[id] != 1 {
				lost++
				if lost <= 5 {
					t.Errorf("shard %d on %s: acknowledged photo %d found %d times (written %s)", shard, p.Server, id, have[id], a.w.placed[id])
				}
			}
		}
		if len(have) > acked+a.failed {
			t.Errorf("shard %d on %s: %d photos, %d acknowledged and %d failed writes", shard, p.Server, len(have), acked, a.failed)
		}
		if lost > 0 {
			t.Errorf("shard %d: %d of %d acknowledged writes lost", shard, lost, acked)
			a.w.logMoves(t, shard)
		}
		t.Logf("shard %d on %s: %d acknowledged writes, all there; %d photos", shard, p.Server, acked, len(have))
	}
	if a.failed > 0 {
		t.Logf("%d writes failed during the failover; last: %v", a.failed, a.last)
	}
}

// copies counts, by the mover's hook, the copies a move ran.
type copies struct{ n atomic.Int32 }

func (c *copies) saw(s Step, done bool) {
	if s == stepCopiedSnapshot && !done {
		c.n.Add(1)
	}
}

// TestMoveKeepsFailoverSlotAcrossSourceFailover (PostgreSQL 17+): s0's
// standby syncs failover slots, and s0 is registered under its primary's
// own DSN. Mid-catch-up, with writers on, once the forward slot is ready
// on the standby, the primary dies; the standby is promoted, the operator
// points s0 at it and records the promotion. The resumed move keeps its
// slot (no second copy), repoints the target's subscription at the
// promoted host, cuts over, verifies and completes: every acknowledged
// write is on the target.
func TestMoveKeepsFailoverSlotAcrossSourceFailover(t *testing.T) {
	ctx := context.Background()
	set := pgtest.Set(t)
	if v, err := set.Clusters[0].VersionNum(ctx); err != nil {
		t.Fatal(err)
	} else if v < 170000 {
		t.Skipf("needs PostgreSQL 17+ for failover slots (the server is %d): "+
			"SHARDKIT_PG_BIN=$(go run ./internal/harness/pglocal/cmd/pgbin 17) go test -run %s ./rebalance", v, t.Name())
	}
	f := newFailoverEnv(t, 2, true)
	first := f.register(t, f.primary.DSN(f.db))
	for s := range 2 {
		seedPhotos(t, f.env, s, 500)
	}
	a := newAckedWriter(t, f.env, []int{0, 1})
	stop := a.run(ctx)
	defer stop()
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 50 })

	var c copies
	var slot string
	killed := false
	mv := f.mover(t, Config{CatchUpTimeout: 20 * time.Second, StepTimeout: 2 * time.Minute, CutoverLag: 100 * time.Millisecond,
		hook: func(m Move, s Step, done bool) {
			c.saw(s, done)
			if s == stepCaughtUp && !done && !killed {
				killed = true
				n, err := moveNames(m)
				if err != nil {
					t.Error(err)
					return
				}
				slot = n.fwd
				f.slotReady(t, slot)
				f.failOver(t)
			}
		}})
	_, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err == nil {
		t.Fatal("the move went on through its source's failover without stopping")
	}
	t.Logf("the move stopped: %v", err)
	second := f.register(t, f.standby.DSN(f.db))
	if second.SystemID != first.SystemID || second.Timeline <= first.Timeline {
		t.Fatalf("recorded %v after the promotion, %v before", second, first)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 100 }) // writes go on, on the promoted host
	m, err := mv.Resume(ctx, 0)
	if err != nil {
		t.Fatalf("resume after the failover: %v", err)
	}
	if m.State != StateReversible {
		t.Fatalf("resumed move ended %s at %s, want reversible", m.State, m.Step)
	}
	if n := c.n.Load(); n != 1 {
		t.Errorf("the move copied %d times, want once: the synced slot %s was not kept", n, slot)
	}
	finishResumed(ctx, t, f, mv, a, stop)
}

// finishResumed ends a resumed move of shard 0: the writers write a
// little longer on the new home, stop, and find every acknowledged write;
// the move verifies and completes, leaving nothing behind.
func finishResumed(ctx context.Context, t *testing.T, f *failoverEnv, mv *Mover, a *ackedWriter, stop func()) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	stop()
	a.check(t, f.pools)
	if _, err := mv.Verify(ctx, 0); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if left := f.leftoversOf(t, 0); len(left) > 0 {
		t.Errorf("left after complete: %v", left)
	}
}

// TestMoveRecopiesWhenSourceFailsOverWithoutSlot: s0's standby syncs no
// slot (PostgreSQL 15 and 16 cannot), so a failover of s0 loses the
// move's forward slot. With writers on, the primary dies mid-copy,
// mid-catch-up or inside the cutover (fenced); the standby is promoted and recorded. The resumed move
// finds the slot gone and copies again from scratch (the shard served by
// its source all along), then cuts over, verifies and completes: every
// acknowledged write is on the target.
//
// Three failovers, each on clusters of its own: about 35 s on a quiet
// machine, so not in -short (the race stage); -race passes it too.
func TestMoveRecopiesWhenSourceFailsOverWithoutSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("three failovers of a move's source, ~35 s: not in -short")
	}
	for _, c := range []struct {
		name   string
		at     Step
		copies int32
	}{
		{"mid-copy", stepCopying, 2},
		{"mid-catch-up", stepCaughtUp, 2},
		// Fenced, before the target applied the final position: the
		// resume releases the fence (the barrier was not sealed) and
		// copies again.
		{"inside-cutover", stepApplied, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFailoverEnv(t, 2, false)
			f.register(t, f.multi)
			for s := range 2 {
				seedPhotos(t, f.env, s, 2000)
			}
			a := newAckedWriter(t, f.env, []int{0, 1})
			stop := a.run(ctx)
			defer stop()
			testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 50 })
			var n copies
			killed := false
			mv := f.mover(t, Config{CatchUpTimeout: 20 * time.Second, StepTimeout: 2 * time.Minute, CutoverLag: 100 * time.Millisecond,
				hook: func(m Move, s Step, done bool) {
					n.saw(s, done)
					if s == c.at && !done && !killed {
						killed = true
						f.failOver(t)
					}
				}})
			if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err == nil {
				t.Fatal("the move went on through its source's failover without stopping")
			} else {
				t.Logf("the move stopped: %v", err)
			}
			f.register(t, f.multi)
			testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= 100 })
			m, err := mv.Resume(ctx, 0)
			if err != nil {
				t.Fatalf("resume after the failover: %v", err)
			}
			if m.State != StateReversible {
				t.Fatalf("resumed move ended %s at %s, want reversible", m.State, m.Step)
			}
			if got := n.n.Load(); got != c.copies {
				t.Errorf("the move copied %d times, want %d", got, c.copies)
			}
			finishResumed(ctx, t, f, mv, a, stop)
		})
	}
}

// TestMoveReversibleAcrossSourceFailover: a move cut over, with reverse
// replication keeping s0 current, when s0's primary dies and its
// synchronous standby is promoted and recorded. The reverse subscription
// is s0's catalog, which the standby has, and its slot is on the target:
// the move stays reversible. Rolled back, the shard is on the promoted
// source with every acknowledged write, those the target took included;
// completed, on the target.
//
// Two failovers, ~25 s: not in -short.
func TestMoveReversibleAcrossSourceFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("two failovers of a move's source, ~25 s: not in -short")
	}
	for _, end := range []string{"rollback", "complete"} {
		t.Run(end, func(t *testing.T) {
			ctx := context.Background()
			f := newFailoverEnv(t, 2, false)
			f.register(t, f.multi)
			for s := range 2 {
				seedPhotos(t, f.env, s, 500)
			}
			a := newAckedWriter(t, f.env, []int{0, 1})
			stop := a.run(ctx)
			defer stop()
			mv := f.mover(t, Config{StepTimeout: 2 * time.Minute, CutoverLag: 100 * time.Millisecond})
			m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.State != StateReversible {
				t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
			}
			before := a.count()
			testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= before+50 }) // on the target
			f.failOver(t)
			f.register(t, f.multi)
			before = a.count()
			testkit.Eventually(t, 30*time.Second, func() bool { return a.count() >= before+100 })
			switch end {
			case "rollback":
				m, err = mv.Rollback(ctx, 0)
				if err == nil && m.State != StateRolledBack {
					err = fmt.Errorf("ended %s at %s", m.State, m.Step)
				}
			case "complete":
				m, err = mv.Complete(ctx, 0)
			}
			if err != nil {
				t.Fatalf("%s after the source's failover: %v", end, err)
			}
			time.Sleep(200 * time.Millisecond)
			stop()
			a.check(t, f.pools)
			want := "s0"
			if end == "complete" {
				want = "s1"
			}
			if p := f.placement(t, 0); p.Server != want || p.State != router.StateActive {
				t.Errorf("shard 0 placed %+v after %s, want %s active", p, end, want)
			}
			if left := f.leftoversOf(t, 0); len(left) > 0 {
				t.Errorf("left after %s: %v", end, left)
			}
		})
	}
}

// TestMoveAfterSourceFailover: s0 failed over earlier (its standby
// promoted and recorded), and its old primary came back as it was,
// writable on its old timeline, first in s0's DSN. A move of a shard of
// s0 copies from the promoted primary, which the catalog records, not
// from the old one: the target has every row written since the failover,
// and the old primary gets no slot or publication.
func TestMoveAfterSourceFailover(t *testing.T) {
	ctx := context.Background()
	f := newFailoverEnv(t, 2, false)
	f.register(t, f.multi)
	seedPhotos(t, f.env, 0, 200)
	f.failOver(t)
	f.register(t, f.multi)
	// The old primary restarts as it was, except that it no longer
	// waits for its synchronous standby, a primary now.
	if err := f.primary.Configure(ctx, map[string]string{"synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := f.primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	newer := pgtest.Connect(t, f.standby.DSN(f.db))
	if _, err := newer.Exec(ctx, `INSERT INTO shard_0000.photos (user_id, caption) SELECT 0, 'after' FROM generate_series(1, 300)`); err != nil {
		t.Fatal(err)
	}
	var want int
	if err := newer.QueryRow(ctx, `SELECT count(*) FROM shard_0000.photos`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	mv := f.mover(t, Config{CatchUpTimeout: 20 * time.Second, StepTimeout: 2 * time.Minute, CutoverLag: 100 * time.Millisecond})
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatalf("move after the failover: %v", err)
	}
	if m.State != StateReversible {
		t.Fatalf("move ended %s at %s, want reversible", m.State, m.Step)
	}
	var got int
	if err := f.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM shard_0000.photos`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("target has %d photos, the promoted primary %d", got, want)
	}
	old := pgtest.Connect(t, f.primary.DSN(f.db))
	var objs int
	if err := old.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)`).Scan(&objs); err != nil {
		t.Fatal(err)
	}
	if objs != 0 {
		t.Errorf("the old primary got %d replication slots and publications", objs)
	}
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := newer.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_subscription)`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d replication objects left on the promoted primary after complete", left)
	}
}
