package plugin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	fo "github.com/shardkit/shardkit/failover"
	"github.com/shardkit/shardkit/internal/harness/linearize"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// The failover histories: each key is one photo row (its likes column a
// register) of a user on server b, which fails over, or on server a,
// which does not. App processes read the rows by ID and write them
// through the plugin while b's primary is killed or switched over, and
// porcupine checks the history per row (internal/harness/linearize). A
// write that failed may have happened; a read that failed is dropped.

// linKey is one register.
type linKey struct {
	user, id int64
	shard    int
	server   string
}

// linProc is one app process: a router and a plugin of its own.
type linProc struct {
	name string
	db   *gorm.DB
	r    *router.Router
	okB  atomic.Int64 // operations on server b that succeeded
	errs atomic.Int64
	last atomic.Value // the latest error, a string
	real atomic.Value // the latest error other than a server known down's
}

// linRun is the workload: processes' clients on the keys until stopped.
type linRun struct {
	f       *failover
	h       *linearize.History
	keys    []linKey
	procs   []*linProc
	clients int
	missed  atomic.Int64 // writes acknowledged that updated no row
	mu      sync.Mutex
	notSent map[int]error // writes the plugin failed sending nothing, by value
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// newLinRun makes keys photos, most on server b, some on a.
func newLinRun(t *testing.T, f *failover) *linRun {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	l := &linRun{f: f, h: linearize.New(), ctx: ctx, stop: stop, notSent: map[int]error{}}
	t.Cleanup(l.finish)
	for _, srv := range []struct {
		name string
		n    int
	}{{"b", 6}, {"a", 2}} {
		for _, u := range f.usersOn(t, srv.name, srv.n) {
			p := Photo{UserID: u, Caption: "register"}
			if err := f.e.db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			l.keys = append(l.keys, linKey{user: u, id: p.ID, shard: f.e.shardOf(u), server: srv.name})
		}
	}
	return l
}

// process is another app process on the env's catalog: a router that
// polls the map every poll (0: never; it reloads the map only when a
// server's refusal makes the plugin do so) and a plugin of its own,
// closed with the test.
func (l *linRun) process(t *testing.T, name string, poll time.Duration) *linProc {
	t.Helper()
	e := l.f.e
	r, err := router.New(context.Background(), e.cat)
	if err != nil {
		t.Fatal(err)
	}
	if poll > 0 {
		ctx, stop := context.WithCancel(context.Background())
		watched := make(chan struct{})
		go func() { defer close(watched); _ = r.WatchWith(ctx, router.WatchOptions{Poll: poll}) }()
		t.Cleanup(func() { stop(); <-watched })
	}
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	p := Register(Config{Router: r, IDs: e.gen}, &Photo{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &linProc{name: name, db: db, r: r}
}

// start runs n clients of process p until finish.
func (l *linRun) start(p *linProc, n int) {
	l.procs = append(l.procs, p)
	for range n {
		id := l.clients
		l.clients++
		l.wg.Go(func() { l.client(p, id) })
	}
}

// client reads and writes random keys through p, pausing after an error
// as a client before it retries.
func (l *linRun) client(p *linProc, id int) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	for l.ctx.Err() == nil {
		ki := rng.IntN(len(l.keys))
		k := l.keys[ki]
		snap := p.r.Snapshot()
		srv, _ := snap.Server(k.server)
		meta := linearize.Meta{Client: id, Shard: k.shard, Before: snap.Version,
			Server: fmt.Sprintf("%s (%s, primary tl%d)", k.server, p.name, srv.Primary.Timeline)}
		in := linearize.Input{Key: ki}
		if rng.IntN(2) == 0 {
			in.Kind = linearize.Read
		} else {
			in.Kind, in.Arg = linearize.Write, l.h.Value()
		}
		// A statement runs to its end on its own context, so that the
		// end of the run does not turn acknowledged writes into errors.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		op := l.h.Call(in, meta)
		var out linearize.Output
		var err error
		if in.Kind == linearize.Read {
			var ph Photo
			err = p.db.WithContext(ctx).Where("user_id = ? AND id = ?", k.user, k.id).Take(&ph).Error
			out.Value = ph.Likes
		} else {
			res := p.db.WithContext(ctx).Model(&Photo{ID: k.id, UserID: k.user}).Update("likes", in.Arg)
			if err = res.Error; err == nil && res.RowsAffected != 1 {
				// The row exists on its home: an update that found none
				// ran elsewhere, and its success is a lie.
				l.missed.Add(1)
				op.Meta.Err = fmt.Sprintf("acknowledged, %d rows updated", res.RowsAffected)
			}
		}
		cancel()
		op.Meta.After = p.r.Snapshot().Version
		if in.Kind == linearize.Write && notSent(err) {
			l.mu.Lock()
			l.notSent[in.Arg] = err
			l.mu.Unlock()
			op.Discard()
		} else {
			op.Return(out, err)
		}
		switch {
		case err != nil:
			p.errs.Add(1)
			p.last.Store(err.Error())
			if !knownDown(err) {
				p.real.Store(err.Error())
			}
			time.Sleep(20 * time.Millisecond)
		case k.server == "b":
			p.okB.Add(1)
		}
		// Pace, not synchronisation: it bounds the history's size, and
		// porcupine's memory, however long a loaded machine stretches
		// the run (rebalance's history test: clientPace).
		time.Sleep(time.Millisecond)
	}
}

// notSent reports the error of a statement the plugin failed at once,
// sending nothing, because its server is taken as down: such a write did
// nothing. The history leaves it out, and check fails the test if a
// read saw its value.
//
// pgconn.SafeToRetry is no such proof: pgx reports "conn closed" (safe
// to retry) for a COMMIT whose connection a FATAL message closed while
// its answer was awaited, and that commit may have been applied.
func notSent(err error) bool { return knownDown(err) }

// progress waits until every process running made n more successful
// operations on server b than when it was called.
func (l *linRun) progress(t *testing.T, n int64) {
	t.Helper()
	from := make([]int64, len(l.procs))
	for i, p := range l.procs {
		from[i] = p.okB.Load()
	}
	testkit.Until(t, 45*time.Second, func() error {
		for i, p := range l.procs {
			if got := p.okB.Load() - from[i]; got < n {
				last, _ := p.last.Load().(string)
				real, _ := p.real.Load().(string)
				return fmt.Errorf("process %s: %d successful operations on b of %d (%d errors, the latest: %s; the latest besides a server known down's: %s)",
					p.name, got, n, p.errs.Load(), last, real)
			}
		}
		return nil
	})
}

func (l *linRun) finish() { l.stop(); l.wg.Wait() }

// errors says how many errors each process has seen so far.
func (l *linRun) errors() string {
	var b strings.Builder
	for i, p := range l.procs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", p.name, p.errs.Load())
	}
	return "errors so far: " + b.String()
}

// check stops the clients, reads each key's final state on its home
// (server b on primary, by the operator) and checks the history.
func (l *linRun) check(t *testing.T, primary *pglocal.Cluster) {
	t.Helper()
	l.finish()
	ctx := context.Background()
	b := pgtest.Connect(t, primary.DSN(l.f.db))
	a := pgtest.Connect(t, l.f.e.dsn["a"])
	for ki, k := range l.keys {
		conn := a
		if k.server == "b" {
			conn = b
		}
		var v int
		q := "SELECT likes FROM " + router.SchemaName(k.shard) + ".photos WHERE id = $1"
		if err := conn.QueryRow(ctx, q, k.id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		l.h.Final(l.clients, ki, v, linearize.Meta{Server: k.server + " (final, on its primary)", Shard: k.shard})
	}
	ops, unknown := l.h.Stats()
	t.Logf("%d operations (%d unknown outcomes) by %d clients", ops, unknown, l.clients)
	for _, p := range l.procs {
		last, _ := p.last.Load().(string)
		t.Logf("%s: %d successful operations on b, %d errors (last: %s)", p.name, p.okB.Load(), p.errs.Load(), last)
	}
	seen := l.h.Seen()
	for v, err := range l.notSent {
		if seen[v] {
			t.Errorf("a write of %d failed at once, its server taken as down, and a read saw it: %v", v, err)
		}
	}
	if n := l.missed.Load(); n > 0 {
		t.Errorf("%d writes were acknowledged without updating their row", n)
	}
	for _, v := range l.h.Check(t) {
		t.Error(v)
	}
}

// TestFailoverLinearizable kills server b's primary (recorded in the
// catalog) under readers and writers of rows on b and on a, promotes its
// synchronous standby and records it, then restarts the old primary as
// it was (writable, on its old timeline, first in b's DSN) and cuts the
// connections to the new one, so that the next ones try the old primary
// first. Three processes read and write through the plugin: one whose
// router polls the map every 50 ms, one started before the failover
// whose router polls every second (stale for up to a second after each
// change), one started after it. The history is linearizable
// per row: no read is served by the old primary, no write lands there,
// and no acknowledged write is lost.
func TestFailoverLinearizable(t *testing.T) {
	ctx := context.Background()
	f := newFailover(t, envOpts{})
	e := f.e
	first := f.recordPrimary(t)
	wctx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	go func() { _ = e.r.WatchWith(wctx, router.WatchOptions{Poll: 50 * time.Millisecond}) }()
	sees(t, e.r, first)

	l := newLinRun(t, f)
	l.start(&linProc{name: "watching", db: e.db, r: e.r}, 3)
	l.start(l.process(t, "stale", time.Second), 2)
	l.progress(t, 30)

	l.h.Note("kill b's primary")
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	l.h.Note("b's standby promoted")
	second := f.recordPrimary(t)
	t.Logf("failover recorded; %s", l.errors())
	l.h.Note("b's new primary recorded (%v); %s", second, l.errors())
	l.progress(t, 30)

	f.restartOld(t)
	l.h.Note("b's old primary restarted as it was, writable on timeline %d", first.Timeline)
	pgtest.Exec(t, f.standby.DSN("postgres"), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+f.db+"' AND pid <> pg_backend_pid()")
	l.h.Note("connections to b's new primary cut")
	l.start(l.process(t, "started after", 200*time.Millisecond), 2)
	l.progress(t, 30)
	l.check(t, f.standby)
}

// TestSwitchoverLinearizable is TestFailoverLinearizable with a planned
// switchover of server b (failover.Switchover) instead of a crash. After
// it, the old primary is made writable again by hand (as it was, on its
// old timeline) and the connections to the new primary are cut, so that
// the next ones try the old primary first.
func TestSwitchoverLinearizable(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	l := newLinRun(t, f)
	l.start(&linProc{name: "watching", db: f.e.db, r: f.e.r}, 3)
	l.start(l.process(t, "stale", time.Second), 2)
	l.progress(t, 30)

	l.h.Note("switchover of b starts")
	rep, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{
		To:       fmt.Sprintf("127.0.0.1:%d", f.standby.Port),
		Progress: func(s fo.Step) { l.h.Note("switchover: %s", s) },
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, replayState(ctx, f))
	}
	l.h.Note("switchover of b done (fenced %v), new primary %v; %s", rep.Fenced.Round(time.Millisecond), rep.Primary, l.errors())
	t.Logf("switchover done; %s", l.errors())
	l.progress(t, 30)

	// An operator makes the old primary writable again by hand: only the
	// fence keeps the routers from it now.
	if err := f.primary.Configure(ctx, map[string]string{"default_transaction_read_only": "off", "synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	l.h.Note("b's old primary made writable again")
	pgtest.Exec(t, f.standby.DSN("postgres"), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+f.db+"' AND pid <> pg_backend_pid()")
	l.h.Note("connections to b's new primary cut")
	l.start(l.process(t, "started after", 200*time.Millisecond), 2)
	l.progress(t, 30)
	l.check(t, f.standby)
}

// replayState describes where b's standby stands in receiving and
// replaying the primary's WAL, and what its startup process waits on,
// for the report of a switchover that stopped at its replay step.
func replayState(ctx context.Context, f *failover) string {
	var b strings.Builder
	ask := func(dsn, q string) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", q, err)
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, q)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", q, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, _ := rows.Values()
			fmt.Fprintf(&b, "%v\n", vals)
		}
	}
	ask(f.primary.DSN("postgres"), "SELECT 'primary', pg_current_wal_lsn(), pg_current_wal_flush_lsn(), state, sent_lsn, flush_lsn, replay_lsn, sync_state FROM pg_stat_replication")
	ask(f.standby.DSN("postgres"), "SELECT 'standby', pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), pg_is_wal_replay_paused(), pg_is_in_recovery()")
	ask(f.standby.DSN("postgres"), "SELECT 'standby backend', backend_type, state, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity WHERE backend_type IN ('startup', 'walreceiver', 'client backend')")
	ask(f.standby.DSN("postgres"), "SELECT 'standby conflicts', datname, confl_lock, confl_snapshot, confl_bufferpin FROM pg_stat_database_conflicts WHERE datname = current_database() OR confl_lock + confl_snapshot + confl_bufferpin > 0")
	return b.String()
}

// TestFailoverUnwatchedRouter: a process whose router does not watch the
// map, started before server b's failover with b's primary recorded.
// After the promotion is recorded it goes on on the new primary: its pool
// for b takes only the recorded old primary and refuses the promoted one
// (a newer timeline is not taken on trust) with router.ErrNotPrimary, and
// that refusal reloads the map (Plugin.reloadSoon), whose record names
// the new primary.
func TestFailoverUnwatchedRouter(t *testing.T) {
	ctx := context.Background()
	f := newFailover(t, envOpts{})
	first := f.recordPrimary(t)
	wctx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	go func() { _ = f.e.r.WatchWith(wctx, router.WatchOptions{Poll: 50 * time.Millisecond}) }()
	sees(t, f.e.r, first)
	l := newLinRun(t, f)
	l.start(l.process(t, "unwatched", 0), 2)
	l.progress(t, 30)
	l.h.Note("kill b's primary")
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	l.h.Note("b's new primary recorded (%v)", f.recordPrimary(t))
	l.progress(t, 30)
	l.check(t, f.standby)
}
