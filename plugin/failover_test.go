package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// failover is an environment whose server b runs on a primary of its own
// with a synchronous standby, registered under one DSN that names both
// hosts with target_session_attrs=read-write, as an HA deployment
// registers it.
type failover struct {
	e                *env
	primary, standby *pglocal.Cluster
	db               string // server b's database
	multi            string // the DSN naming both hosts
}

func newFailover(t *testing.T, o envOpts) *failover {
	t.Helper()
	ctx := context.Background()
	primary, dsnOf := ownClusterForB(t)
	o.dsnOf = dsnOf
	e := newEnv(t, o)
	pc, err := pgconn.ParseConfig(e.dsn["b"])
	if err != nil {
		t.Fatal(err)
	}
	// The standby is made after provisioning, so that it has b's shards.
	standby, err := pgtest.Set(t).AddStandby(ctx, primary, pglocal.StandbyOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	f := &failover{e: e, primary: primary, standby: standby, db: pc.Database}
	// The test's database on the primary is dropped when it ends, which
	// needs a primary killed by the test to be up again, and not waiting
	// for a synchronous standby that is now a primary itself.
	t.Cleanup(func() { f.restartOld(t) })
	f.multi = fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		primary.Port, standby.Port, pc.Database)
	if err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, "b", f.multi, "")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	e.dsn["b"] = f.multi
	return f
}

// restartOld restarts the old primary as it was (crash recovery on its
// old timeline, writable) except that it no longer waits for its
// synchronous standby, which is a primary now: it acknowledges what it
// is sent, as an old primary with asynchronous replication would.
func (f *failover) restartOld(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := f.primary.Configure(ctx, map[string]string{"synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := f.primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// usersOn returns n users whose shards the map places on server.
func (f *failover) usersOn(t *testing.T, server string, n int) []int64 {
	t.Helper()
	var out []int64
	for u := int64(1); len(out) < n; u++ {
		if f.e.serverOf(t, f.e.shardOf(u)) == server {
			out = append(out, u)
		}
	}
	return out
}

// load is writers inserting photos until stopped, each write's outcome
// recorded: the IDs acknowledged, the errors, and when each write ended.
type load struct {
	mu    sync.Mutex
	acked []int64
	errs  map[string][]error // by server
	oks   []ack
	stop  atomic.Bool
	wg    sync.WaitGroup
}

// ack is an acknowledged write: its server and when it returned.
type ack struct {
	server string
	at     time.Time
}

// write runs one writer per user until stop.
func (l *load) write(t *testing.T, f *failover, users []int64) {
	l.errs = map[string][]error{}
	for _, u := range users {
		server := f.e.serverOf(t, f.e.shardOf(u))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				p := Photo{UserID: u, Caption: "failover"}
				err := f.e.db.WithContext(ctx).Create(&p).Error
				cancel()
				l.mu.Lock()
				if err == nil {
					l.acked = append(l.acked, p.ID)
					l.oks = append(l.oks, ack{server, time.Now()})
				} else {
					l.errs[server] = append(l.errs[server], err)
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a client's pause before it retries
				}
			}
		}()
	}
}

func (l *load) finish() { l.stop.Store(true); l.wg.Wait() }

// ackedSince counts the writes to server acknowledged after t.
func (l *load) ackedSince(server string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ok := range l.oks {
		if ok.server == server && ok.at.After(t) {
			n++
		}
	}
	return n
}

// firstAckAfter is when the first write to server acknowledged after t
// returned.
func (l *load) firstAckAfter(server string, t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, ok := range l.oks {
		if ok.server == server && ok.at.After(t) && (first.IsZero() || ok.at.Before(first)) {
			first = ok.at
		}
	}
	return first
}

// checkErrors fails the test for any error that is not a shardkit error
// that Retryable accepts: a client under failover retries what it is told
// to retry and nothing else.
func (l *load) checkErrors(t *testing.T, server string) {
	t.Helper()
	for s, errs := range l.errs {
		if s != server && len(errs) > 0 {
			t.Errorf("%d errors on server %s, which did not fail over: %v", len(errs), s, errs[0])
		}
		for _, err := range errs {
			var se *ShardError
			var sv *ServerError
			if !(errors.As(err, &se) || errors.As(err, &sv)) || !Retryable(err) {
				t.Errorf("error during the failover is not a retryable shardkit error: %T %v", err, err)
			}
		}
	}
}

// checkNothingLost fails the test unless every acknowledged write is on
// server b's current primary (read through the plugin).
func (l *load) checkNothingLost(t *testing.T, f *failover) {
	t.Helper()
	l.mu.Lock()
	acked := append([]int64(nil), l.acked...)
	l.mu.Unlock()
	var got []Photo
	if err := f.e.db.Clauses(AllShards()).Where("caption = ?", "failover").Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	have := map[int64]bool{}
	for _, p := range got {
		have[p.ID] = true
	}
	var lost []int64
	for _, id := range acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes lost: %v", len(lost), len(acked), lost)
	}
}

// TestFailoverSyncStandby kills server b's primary under load and
// promotes its synchronous standby: no acknowledged write is lost, every
// error on the way is a retryable shardkit error, server a never fails,
// and writes to b succeed again soon after the promotion.
func TestFailoverSyncStandby(t *testing.T) {
	ctx := context.Background()
	f := newFailover(t, envOpts{})
	var l load
	l.write(t, f, append(f.usersOn(t, "b", 4), f.usersOn(t, "a", 1)...))
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool { return l.ackedSince("b", start) >= 20 })
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	testkit.Eventually(t, 60*time.Second, func() bool { return l.ackedSince("b", promoted) >= 40 })
	l.finish()
	first := l.firstAckAfter("b", promoted)
	t.Logf("killed, promoted %v later; first write to b %v after the promotion; %d writes acknowledged, %d errors on b",
		promoted.Sub(killed).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond), len(l.acked), len(l.errs["b"]))
	l.checkErrors(t, "b")
	l.checkNothingLost(t, f)
	// The bound is generous for a loaded machine; the figure is the log's.
	if d := first.Sub(promoted); d > 10*time.Second {
		t.Errorf("first write %v after the promotion, want within seconds", d)
	}
}

// recordPrimary records the host that answers read-write on server b as
// its primary, as an HA tool's promotion hook does (shardctl server
// promoted b), and returns it.
func (f *failover) recordPrimary(t *testing.T) router.Primary {
	t.Helper()
	got, _, err := f.e.cat.RecordServerPrimary(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sees waits until db's router serves server b with primary p.
func sees(t *testing.T, r *router.Router, p router.Primary) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		srv, _ := r.Snapshot().Server("b")
		return srv.Primary == p
	})
}

// writeRetrying inserts a photo for user u through db, running it again
// while the plugin calls the error retryable, and returns its ID.
func writeRetrying(t *testing.T, db *gorm.DB, u int64) int64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := Photo{UserID: u, Caption: "after"}
		err := db.Create(&p).Error
		if err == nil {
			return p.ID
		}
		if !Retryable(err) || time.Now().After(deadline) {
			t.Fatalf("write for user %d: %v", u, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onHost counts the photos with these IDs in server b's shards on the
// cluster c, connecting to it directly.
func (f *failover) onHost(t *testing.T, c *pglocal.Cluster, ids []int64) int {
	t.Helper()
	conn := pgtest.Connect(t, c.DSN(f.db))
	n := 0
	for s := 0; s < f.e.shards; s++ {
		if f.e.serverOf(t, s) != "b" {
			continue
		}
		var k int
		q := "SELECT count(*) FROM " + pgx.Identifier{router.SchemaName(s), "photos"}.Sanitize() + " WHERE id = ANY($1)"
		if err := conn.QueryRow(context.Background(), q, ids).Scan(&k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}

// TestFailoverOldPrimaryFenced fails server b over with its primary
// recorded in the catalog, records the promoted standby as an HA tool's
// hook does, and restarts the old primary as it was (writable, on its old
// timeline). A running process whose connections are cut (so that it
// tries the hosts in the DSN's order, the old primary first) and a new
// process each write rows and read them back: every write lands on the
// new primary, none on the old one, and every read finds its row (the
// old primary has none of them, so a read it served would not).
func TestFailoverOldPrimaryFenced(t *testing.T) {
	ctx := context.Background()
	f := newFailover(t, envOpts{})
	e := f.e
	first := f.recordPrimary(t)
	wctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() { _ = e.r.WatchWith(wctx, router.WatchOptions{Poll: 50 * time.Millisecond}) }()
	sees(t, e.r, first)

	var l load
	l.write(t, f, append(f.usersOn(t, "b", 4), f.usersOn(t, "a", 1)...))
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool { return l.ackedSince("b", start) >= 20 })
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	second := f.recordPrimary(t)
	if second.SystemID != first.SystemID || second.Timeline <= first.Timeline {
		t.Fatalf("recorded %v after the promotion, %v before: want the same system on a newer timeline", second, first)
	}
	testkit.Eventually(t, 60*time.Second, func() bool { return l.ackedSince("b", promoted) >= 40 })
	l.finish()
	t.Logf("first write to b %v after the promotion (recorded by the test at once); %d writes acknowledged, %d errors on b",
		l.firstAckAfter("b", promoted).Sub(promoted).Round(time.Millisecond), len(l.acked), len(l.errs["b"]))
	l.checkErrors(t, "b")
	l.checkNothingLost(t, f)
	sees(t, e.r, second)

	f.restartOld(t)
	// The old primary is writable again, on its old timeline.
	old := pgtest.Connect(t, f.primary.DSN(f.db))
	if got, err := router.ReadPrimary(ctx, old.PgConn()); err != nil || got != first {
		t.Fatalf("old primary restarted as %v (%v), want %v", got, err, first)
	}

	// The running process: its connections to the new primary end, so
	// that its next ones try the old primary first.
	pgtest.Exec(t, f.standby.DSN("postgres"), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+f.db+"' AND pid <> pg_backend_pid()")
	// A new process, with a router and a plugin of its own.
	db2 := e.process(ctx, t)
	for _, proc := range []struct {
		name string
		db   *gorm.DB
	}{{"running process", e.db}, {"new process", db2}} {
		var ids []int64
		users := f.usersOn(t, "b", 16)
		for _, u := range users {
			ids = append(ids, writeRetrying(t, proc.db, u))
		}
		for i, id := range ids {
			var p Photo
			if err := proc.db.Where("user_id = ? AND id = ?", users[i], id).Take(&p).Error; err != nil {
				t.Errorf("%s: read of photo %d written after the failover: %v", proc.name, id, err)
			}
		}
		if n := f.onHost(t, f.primary, ids); n != 0 {
			t.Errorf("%s: %d of its %d writes went to the old primary", proc.name, n, len(ids))
		}
		if n := f.onHost(t, f.standby, ids); n != len(ids) {
			t.Errorf("%s: %d of its %d writes on the new primary", proc.name, n, len(ids))
		}
	}

	// The admin path goes to the new primary too: pg_dump is given every
	// host of the DSN and its target_session_attrs, not the first host,
	// which is the old primary.
	u := f.usersOn(t, "b", 1)[0]
	id := writeRetrying(t, e.db, u)
	var dump bytes.Buffer
	if _, err := backup.Dump(ctx, e.cat, e.shardOf(u), &dump, backup.DumpOptions{}); err != nil {
		t.Fatalf("dump of shard %d after the failover: %v", e.shardOf(u), err)
	}
	_, archive, err := backup.ReadHeader(&dump)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := pglocal.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	restore := exec.CommandContext(ctx, filepath.Join(bin, "pg_restore"), "--data-only", "-f", "-")
	restore.Stdin = archive
	text, err := restore.Output()
	if err != nil {
		t.Fatalf("pg_restore of the dump: %v", err)
	}
	if !bytes.Contains(text, []byte(strconv.FormatInt(id, 10))) {
		t.Fatalf("the dump of shard %d after the failover lacks photo %d written to the new primary: pg_dump read another host", e.shardOf(u), id)
	}
}

// process is another app process on e's catalog: a router that does not
// watch the map and a plugin of its own (closed with the test).
func (e *env) process(ctx context.Context, t *testing.T) *gorm.DB {
	t.Helper()
	return e.processWith(ctx, t, e.cat)
}

// processWith is process with its router reading the map from src and
// its plugin's Config changed by each of cfg.
func (e *env) processWith(ctx context.Context, t *testing.T, src router.Source, cfg ...func(*Config)) *gorm.DB {
	t.Helper()
	r, err := router.New(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Router: r, IDs: e.gen}
	for _, f := range cfg {
		f(&c)
	}
	p := Register(c, &Photo{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return db
}
