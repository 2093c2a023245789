package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// BenchmarkScatter: reads of all 2000 shards on four servers (four
// databases on the two test clusters), each paired in every iteration
// with the same query on one unsharded table holding the same rows, so
// that the ratio is read from one run on one machine. perShard is the
// same read sent as one statement per shard. first_read is the first read
// of a freshly opened plugin against its warm reads. pgbouncer_prepared
// reads through PgBouncers that carry prepared statements (1.21 or later,
// max_prepared_statements) with PreparedReadsAlways, pgbouncer_fallback
// through ones that do not, with the default (unnamed there).
//
//	go test ./plugin -run '^$' -bench BenchmarkScatter -benchtime 20x -count 3
func BenchmarkScatter(b *testing.B) {
	const shards, perShard = 2000, 20
	e := newEnv(b, envOpts{shards: shards, four: true, noIDs: true})
	plain := seedScatter(b, e, perShard)
	reads := []struct {
		name string
		fn   func(db *gorm.DB) error
		raw  func(schema string) string // the read of one shard, for rawFirstRead
		sum  string                     // how rawFirstRead combines a batch of them
	}{
		{"order_by_id_desc_limit_50", func(db *gorm.DB) error {
			var ps []Photo
			if err := db.Order("id desc").Limit(50).Find(&ps).Error; err != nil {
				return err
			}
			if len(ps) != 50 {
				return fmt.Errorf("%d rows", len(ps))
			}
			return nil
		}, func(schema string) string {
			return "(SELECT id, user_id, caption, likes, created_at FROM " + schema + ".photos ORDER BY id DESC LIMIT 50)"
		}, "SELECT * FROM (%s) AS t ORDER BY id DESC LIMIT 50"},
		{"count", func(db *gorm.DB) error {
			var n int64
			if err := db.Model(&Photo{}).Count(&n).Error; err != nil {
				return err
			}
			if n != shards*perShard {
				return fmt.Errorf("count %d", n)
			}
			return nil
		}, func(schema string) string {
			return "SELECT count(*) AS n FROM " + schema + ".photos"
		}, "SELECT sum(n) FROM (%s) AS t"},
	}
	all := e.db.Clauses(AllShards()).Session(&gorm.Session{}) // reusable: each read starts from this statement
	// The first read of a fresh plugin (new pools: connections and
	// prepared statements made on the way) against a warm one, and the
	// plugin's start-up (Use, warm-up included): with the default
	// configuration, and with Config.WarmUp. The same through PgBouncer
	// is measured with the poolers below.
	for _, r := range reads {
		b.Run("first_read/"+r.name, func(b *testing.B) {
			firstReads(b, e.def, Config{Router: e.r}, r.fn, func() (time.Duration, time.Duration) {
				return rawFirstRead(b, e, r.raw, r.sum)
			})
		})
		b.Run("first_read_warmup/"+r.name, func(b *testing.B) {
			firstReads(b, e.def, Config{Router: e.r, WarmUp: WarmUpBlocking, WarmUpTimeout: -1}, r.fn, nil)
		})
	}
	for _, r := range reads {
		for _, mode := range []struct {
			name    string
			batch   int
			unnamed bool // PreparedReadsNever: the fallback behind a pooler without prepared statements
		}{{"union_100", 100, false}, {"union_100_exec", 100, true}, {"union_250", 250, false}, {"union_500", 500, false}, {"per_shard", 1, false}} {
			e.p.unionBatch = mode.batch
			e.namedReads(b, !mode.unnamed)
			if mode.unnamed {
				e.freshConns(b)
			}
			for range 3 {
				_ = r.fn(all)
				_ = r.fn(plain)
			}
			b.Run(r.name+"/"+mode.name, func(b *testing.B) {
				pairedReads(b, shards, func() error { return r.fn(all) }, func() error { return r.fn(plain) })
			})
		}
	}
	e.p.unionBatch = 0
	e.namedReads(b, true)
	// Through PgBouncer in transaction mode (the plain table still read
	// directly): 1.24 carrying prepared statements with PreparedReadsAlways,
	// and 1.18, which does not, with the default (unnamed there).
	for _, pooler := range []struct {
		name string
		opts pgbouncer.Options
		mode PreparedReads
	}{
		{"pgbouncer_prepared", pgbouncer.Options{PreparedStatements: 200}, PreparedReadsAlways},
		{"pgbouncer_fallback", pgbouncer.Options{}, PreparedReadsDirect},
	} {
		if pooler.opts.PreparedStatements > 0 {
			if _, err := pgbouncer.PreparedBinary(); err != nil {
				b.Logf("%s: %v", pooler.name, err)
				continue
			}
		}
		pooled, fixed := e.throughPoolers(b, pooler.opts, pooler.mode)
		for _, r := range reads {
			for range 3 {
				_ = r.fn(pooled)
				_ = r.fn(plain)
			}
			b.Run(r.name+"/"+pooler.name, func(b *testing.B) {
				pairedReads(b, shards, func() error { return r.fn(pooled) }, func() error { return r.fn(plain) })
			})
			// A fresh process behind the same poolers: its first read
			// meets server connections other processes warmed.
			b.Run("first_read_"+pooler.name+"/"+r.name, func(b *testing.B) {
				firstReads(b, e.def, Config{Router: fixed, PreparedReads: pooler.mode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, r.fn, nil)
			})
		}
	}
}

// seedScatter puts perShard photos in each of the env's shards (users
// shard+2000k, IDs composed as the plugin would: time base+1 … base+perShard)
// and analyzes the servers, and returns plain GORM on one unsharded table
// of the same rows, in a database of its own on the first cluster.
func seedScatter(b testing.TB, e *env, perShard int) *gorm.DB {
	b.Helper()
	snap := e.r.Snapshot()
	const rowsSQL = `SELECT ((%d::bigint + g) << 23) | (%d::bigint << 10) | 1, %d::bigint + 2000 * g, 'c' || g, g %% 7
FROM generate_series(1, %d) AS g`
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() - snap.Layout.EpochMs
	for s := 0; s < e.shards; s++ {
		pl, _ := snap.Placement(s)
		e.rawExec(b, pl.Server, fmt.Sprintf("INSERT INTO %s.photos (id, user_id, caption, likes) "+rowsSQL, router.SchemaName(s), base, s, s, perShard))
	}
	for _, name := range e.servers {
		e.rawExec(b, name, "ANALYZE")
	}
	plainDSN := pgtest.NewDatabase(b, 0)
	pgtest.Exec(b, plainDSN, `CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text NOT NULL DEFAULT '',
		likes integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX photos_user_id ON photos (user_id, id DESC)`)
	pgtest.Exec(b, plainDSN, fmt.Sprintf(`INSERT INTO photos (id, user_id, caption, likes)
		SELECT ((%d::bigint + g) << 23) | (s::bigint << 10) | 1, s + 2000 * g, 'c' || g, g %% 7
		FROM generate_series(0, %d) AS s, generate_series(1, %d) AS g; ANALYZE photos`, base, e.shards-1, perShard))
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	return plain
}

// pairedReads times a read of every shard paired with the plain table's
// in every iteration, and then the CPU each takes. The ratio is of the
// means; median-ratio is of the medians, which a few reads slowed by
// whatever else the machine runs move less (the plain read, under a
// millisecond, swings most).
func pairedReads(b *testing.B, shards int, sharded, plain func() error) {
	ts, tp := make([]time.Duration, b.N), make([]time.Duration, b.N)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := sharded(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := plain(); err != nil {
			b.Fatal(err)
		}
		ts[i], tp[i] = t1.Sub(t0), time.Since(t1)
	}
	sum := func(d []time.Duration) (t time.Duration) {
		for _, x := range d {
			t += x
		}
		return t
	}
	b.ReportMetric(float64(sum(ts).Microseconds())/float64(b.N), "sharded-µs/op")
	b.ReportMetric(float64(sum(tp).Microseconds())/float64(b.N), "plain-µs/op")
	b.ReportMetric(float64(sum(ts))/float64(sum(tp)), "ratio")
	b.ReportMetric(float64(median(ts))/float64(median(tp)), "median-ratio")
	// CPU spent per read, by this process and by the test clusters'
	// processes: the wall-clock ratio above swings with whatever else
	// this machine runs, the CPU each side takes much less.
	shardedCPU := measureCPU(b, cpuReads, sharded)
	plainCPU := measureCPU(b, 20*cpuReads, plain)
	b.ReportMetric(float64(shardedCPU.client.Microseconds()), "sharded-client-cpu-µs/op")
	b.ReportMetric(float64(shardedCPU.server.Microseconds()), "sharded-server-cpu-µs/op")
	b.ReportMetric(float64(shardedCPU.server.Nanoseconds())/1e3/float64(shards), "server-cpu-µs/shard")
	b.ReportMetric(float64(plainCPU.client+plainCPU.server)/1e3, "plain-cpu-µs/op")
	b.ReportMetric(float64(shardedCPU.client+shardedCPU.server)/float64(plainCPU.client+plainCPU.server), "cpu-ratio")
}

// throughPoolers returns a gorm.DB with a plugin of its own whose servers'
// application DSNs go through PgBouncers started with opts in front of
// the test clusters (their admin DSNs stay direct), reading with mode,
// scoped to every shard. The PgBouncers stop when the benchmark ends.
func (e *env) throughPoolers(b *testing.B, opts pgbouncer.Options, mode PreparedReads) (*gorm.DB, *router.Router) {
	b.Helper()
	snap := e.r.Snapshot()
	bouncers := map[string]*pgbouncer.Bouncer{}
	var servers []router.Server
	for _, srv := range snap.Servers() {
		u, err := url.Parse(srv.DSN)
		if err != nil {
			b.Fatal(err)
		}
		bn := bouncerFor(b, bouncers, srv.DSN, opts)
		srv.AdminDSN = srv.Admin()
		servers = append(servers, behindPooler(srv, bn.DSN(strings.TrimPrefix(u.Path, "/"))))
	}
	pooledSnap, err := snap.Next(snap.Version, servers, nil)
	if err != nil {
		b.Fatal(err)
	}
	fixed, err := router.NewFixed(pooledSnap)
	if err != nil {
		b.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	pl := Register(Config{Router: fixed, PreparedReads: mode, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, &Photo{}, &Like{}, &Album{})
	if err := db.Use(pl); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = pl.Close()
		if sdb, err := db.DB(); err == nil {
			_ = sdb.Close()
		}
	})
	return db.Clauses(AllShards()).Session(&gorm.Session{}), fixed
}

// firstReads times, b.N times, a freshly opened plugin configured by
// cfg on a gorm.DB opened on dsn: its start-up (Use), its first read across
// shards and the mean of the five warm reads after it; raw, when given,
// times the same in plain SQL on a fresh connection.
func firstReads(b *testing.B, dsn string, cfg Config, read func(db *gorm.DB) error, raw func() (first, warm time.Duration)) {
	b.Helper()
	var startup, first, warm, rawFirst, rawWarm time.Duration
	for range b.N {
		fresh, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			b.Fatal(err)
		}
		pl := Register(cfg, &Photo{}, &Like{}, &Album{})
		t0 := time.Now()
		if err := fresh.Use(pl); err != nil {
			b.Fatal(err)
		}
		startup += time.Since(t0)
		t0 = time.Now()
		if err := read(fresh.Clauses(AllShards())); err != nil {
			b.Fatal(err)
		}
		first += time.Since(t0)
		t0 = time.Now()
		for range 5 {
			if err := read(fresh.Clauses(AllShards())); err != nil {
				b.Fatal(err)
			}
		}
		warm += time.Since(t0) / 5
		_ = pl.Close()
		if db, err := fresh.DB(); err == nil {
			_ = db.Close()
		}
		if raw != nil {
			f, w := raw()
			rawFirst += f
			rawWarm += w
		}
	}
	n := float64(b.N)
	if raw != nil {
		b.ReportMetric(float64(rawFirst)/float64(rawWarm), "raw-first/warm")
	}
	b.ReportMetric(float64(first.Microseconds())/1e3/n, "first-ms/op")
	b.ReportMetric(float64(warm.Microseconds())/1e3/n, "warm-ms/op")
	b.ReportMetric(float64(first)/float64(warm), "first/warm")
	b.ReportMetric(float64(startup.Microseconds())/1e3/n, "startup-ms/op")
}

// namedReads makes the plugin's reads across shards run named or unnamed
// on every server, as PreparedReads would.
func (e *env) namedReads(t testing.TB, on bool) {
	t.Helper()
	for _, srv := range e.serverPools(t) {
		srv.named = on
	}
}

// serverPools returns the plugin's pool of each of the env's servers.
func (e *env) serverPools(t testing.TB) []*serverDB {
	t.Helper()
	var out []*serverDB
	for _, s := range e.servers {
		srv, err := e.p.pools.get(e.r.Snapshot(), s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, srv)
	}
	return out
}

// freshConns closes the idle connections of the plugin's server pools,
// so that the next statements run on new server backends. A deployment
// that reads unnamed (PreparedReadsNever, or a pooler's fallback) never
// holds named plans on its connections. A backend that has held them plans
// an unnamed statement of 100 tables with 1.4–5× the CPU (by what a page
// fault costs the machine): glibc gives the planner's memory back to the
// kernel after each statement and faults it in again on the next
// (docs/operations.md), which is not what such a deployment pays.
func (e *env) freshConns(t testing.TB) {
	t.Helper()
	for _, srv := range e.serverPools(t) {
		srv.SetMaxIdleConns(0)
		srv.SetMaxIdleConns(max(e.p.cfg.MaxIdleConns, 0))
	}
}

// cpuReads is how many reads of all shards measureCPU times (the plain
// table's 20 times as many): enough clock ticks of /proc's 10 ms.
const cpuReads = 40

type cpuPerRead struct{ client, server time.Duration }

// measureCPU runs read n times and returns the CPU time per read of this
// process (getrusage) and of the test clusters (every process whose
// parent is one of their postmasters, from /proc).
func measureCPU(b *testing.B, n int, read func() error) cpuPerRead {
	b.Helper()
	var postmasters []int
	for i := range 2 {
		pid, err := postmasterPID(pgtest.Cluster(b, i).Dir)
		if err != nil {
			b.Fatal(err)
		}
		postmasters = append(postmasters, pid)
	}
	c0, s0 := selfCPU(b), clustersCPU(postmasters)
	for range n {
		if err := read(); err != nil {
			b.Fatal(err)
		}
	}
	c1, s1 := selfCPU(b), clustersCPU(postmasters)
	return cpuPerRead{client: (c1 - c0) / time.Duration(n), server: (s1 - s0) / time.Duration(n)}
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func postmasterPID(dataDir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// clustersCPU sums user and system time of the postmasters and their
// children (backends, background workers), in /proc's clock ticks of
// 10 ms.
func clustersCPU(postmasters []int) time.Duration {
	var ticks int64
	for _, pid := range processes() {
		f := procStat(pid)
		if len(f) < 13 {
			continue // gone meanwhile
		}
		ppid, _ := strconv.Atoi(f[1])
		if !slices.Contains(postmasters, pid) && !slices.Contains(postmasters, ppid) {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// processes lists the IDs of this machine's processes, from /proc.
func processes() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// procStat returns the fields of /proc/<pid>/stat after the process's
// name (state, ppid, … utime at 11, stime at 12), nil when it is gone.
func procStat(pid int) []string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	_, rest, ok := strings.Cut(string(raw), ") ") // pid (comm) state ppid …
	if !ok {
		return nil
	}
	return strings.Fields(rest)
}

// rawFirstRead measures the floor under a fresh process's first read: the
// same read of one server's shards in plain SQL, batched by 100 as the
// plugin does, on a fresh connection (a new server backend, which reads each
// shard table's catalog entries the first time it touches it), against the
// same statements again on that connection. pgx's default prepares and
// caches them, as the plugin's default does on a direct connection.
func rawFirstRead(b *testing.B, e *env, one func(schema string) string, sum string) (first, warm time.Duration) {
	b.Helper()
	server := e.servers[0]
	snap := e.r.Snapshot()
	var stmts []string
	var batch []string
	for _, s := range snap.ShardsOn(server) {
		batch = append(batch, one(pgx.Identifier{router.SchemaName(s)}.Sanitize()))
		if len(batch) == 100 {
			stmts = append(stmts, fmt.Sprintf(sum, strings.Join(batch, " UNION ALL ")))
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		stmts = append(stmts, fmt.Sprintf(sum, strings.Join(batch, " UNION ALL ")))
	}
	db, err := sql.Open("pgx", e.dsn[server])
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background()) // one backend for all the statements
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	run := func() time.Duration {
		t0 := time.Now()
		for _, q := range stmts {
			rows, err := conn.QueryContext(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
			rows.Close()
		}
		return time.Since(t0)
	}
	first = run()
	for range 5 {
		warm += run() / 5
	}
	return first, warm
}

// median is the middle of d (the mean of the two middle ones for an
// even count); it sorts d.
func median[T ~int64 | ~float64](d []T) T {
	slices.Sort(d)
	n := len(d)
	if n%2 == 1 {
		return d[n/2]
	}
	return (d[n/2-1] + d[n/2]) / 2
}
