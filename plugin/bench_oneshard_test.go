package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// oneShardBlocks and oneShardBlock are how many blocks of how many
// statements each side of BenchmarkOneShardVsPlain runs per operation:
// SHARDKIT_BENCH_BLOCKS and SHARDKIT_BENCH_BLOCK change them.
const (
	oneShardBlocks = 40
	oneShardBlock  = 50
)

// backendCPU is the CPU time a server backend has run, from the
// scheduler's own count (/proc/PID/schedstat, nanoseconds): the clock
// ticks of /proc/PID/stat are too coarse for a block of statements.
func backendCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		b.Fatalf("read the CPU time of backend %d (the server must run on this machine): %v", pid, err)
	}
	f := strings.Fields(string(raw))
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// backendPID is the pid of the one backend a pool of one connection has.
func backendPID(b *testing.B, db *sql.DB) int {
	var pid int
	if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	return pid
}

// oneSide is one side of BenchmarkOneShardVsPlain: its statement and the
// backends it runs on.
type oneSide struct {
	run  func(i int) error
	pids func() []int // read at the start and the end: a pool that replaced its connection fails the run
}

// blockFigures are per-statement medians over the blocks of one side:
// wall time, the client's CPU, the share of it in the kernel, the
// client's voluntary context switches per statement (its waits that put
// a thread to sleep) and the servers' CPU.
type blockFigures struct {
	wall, client, sys, server time.Duration
	sleeps                    float64
}

// processUsage is the process's CPU time in the kernel and its voluntary
// context switches so far.
func processUsage() (time.Duration, int64) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Stime.Nano()), ru.Nvcsw
}

// medianDur is median (bench_scatter_test.go) of a copy of d.
func medianDur(d []time.Duration) time.Duration { return median(slices.Clone(d)) }

// inBlocks runs the two sides in turn, blocks blocks of n statements
// each, a's block then b's, and returns each side's medians per
// statement: wall time, the client process's CPU time (all its threads,
// the garbage collector's included) and its backends' CPU time.
func inBlocks(b *testing.B, blocks, n int, pick []int, sides ...oneSide) []blockFigures {
	type acc struct {
		wall, client, sys, server []time.Duration
		sleeps                    []float64
	}
	accs := make([]acc, len(sides))
	pids := make([][]int, len(sides))
	for i, s := range sides {
		pids[i] = s.pids()
	}
	k := 0
	for range blocks {
		for i, s := range sides {
			var srv0 time.Duration
			for _, pid := range pids[i] {
				srv0 += backendCPU(b, pid)
			}
			s0, v0 := processUsage()
			t0, c0 := time.Now(), processCPU()
			// Labelled, so that a CPU profile of the run (-cpuprofile)
			// takes each side apart: pprof -tagfocus 'side=0,op=…'.
			pprof.Do(context.Background(), pprof.Labels("side", strconv.Itoa(i), "op", b.Name()), func(context.Context) {
				for j := range n {
					if err := s.run(pick[(k+j)%len(pick)]); err != nil {
						b.Fatal(err)
					}
				}
			})
			wall, client := time.Since(t0), processCPU()-c0
			s1, v1 := processUsage()
			var srv1 time.Duration
			for _, pid := range pids[i] {
				srv1 += backendCPU(b, pid)
			}
			d := time.Duration(n)
			accs[i].wall = append(accs[i].wall, wall/d)
			accs[i].client = append(accs[i].client, client/d)
			accs[i].server = append(accs[i].server, (srv1-srv0)/d)
			accs[i].sys = append(accs[i].sys, (s1-s0)/d)
			accs[i].sleeps = append(accs[i].sleeps, float64(v1-v0)/float64(n))
		}
		k += n
	}
	out := make([]blockFigures, len(sides))
	for i, s := range sides {
		if got := s.pids(); !slices.Equal(got, pids[i]) {
			b.Fatalf("side %d changed backends during the run (%v, then %v): its server CPU is not its own", i, pids[i], got)
		}
		out[i] = blockFigures{wall: medianDur(accs[i].wall), client: medianDur(accs[i].client), sys: medianDur(accs[i].sys), server: medianDur(accs[i].server), sleeps: median(slices.Clone(accs[i].sleeps))}
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkOneShardVsPlain measures the statements of one shard against plain
// GORM as separate machines would run them: the plugin on 2000 logical
// shards over two servers (clusters 0 and 1), plain GORM in its default
// configuration on one table holding the same rows on a cluster of its
// own, each side on one connection (one backend a server). The two sides
// run in turn in blocks (a sharded block, then a plain block), so that
// neither pays for switching between clusters inside its block, and load
// from elsewhere on a shared machine falls on both alike. Each
// sub-benchmark reports the medians per statement over the blocks: wall
// time (ns/stmt), client CPU (cpu-ns/stmt, the process's, all threads),
// the kernel's part of it (sys-ns/stmt, from getrusage, which splits by
// ticks: read it as rough), the client's voluntary context switches
// (sleeps/stmt: a thread put to sleep waiting) and the backends' CPU
// (server-ns/stmt), each side's, and the sharded /
// plain ratios, and how many one-shard statements the sharded backends
// prepared during the run (sharded-prepared-in-run: the plugin's cache
// misses, 0 in the steady state). Run it with -benchtime 1x: the blocks
// are the repetition.
//
// The split/ sub-benchmarks take a select by ID apart, each against
// plain GORM: raw SQL on the server's pool (no GORM, no plugin) sent as
// the plugin sends it, unnamed and prepared from the plugin's cache of
// one-shard reads, on random shards and on one shard only (a backend
// that touches one schema, not a thousand); the plugin's own select by
// ID on one shard only (plugin_one_shard: its client path without the
// cost of many tables) and on server a's random shards alone
// (plugin_server_a: one backend, as the raw rows); and an update by ID,
// each against plain GORM's: raw SQL in a transaction on plain GORM's
// pool (GORM's share), on a shard server unnamed (what a write cost the
// server before the plugin prepared writes), and prepared as the plugin
// runs it now; and an insert in raw SQL, prepared, on plain GORM's pool
// and on a shard server's random shards, each against plain GORM's.
func BenchmarkOneShardVsPlain(b *testing.B) { oneShardVsPlain(b, false) }

// BenchmarkOneShardVsPlainPooled is BenchmarkOneShardVsPlain with each
// side behind a PgBouncer of its own that carries prepared statements
// (1.21 or later, max_prepared_statements above what a server connection
// holds, one server connection a database): the plugin with
// PreparedReadsAlways, plain GORM in its default configuration, whose
// statement cache PgBouncer carries the same way. The server CPU is the
// one backend's behind each PgBouncer; PgBouncer's own CPU counts on
// neither side. It runs the four statements, not the split.
func BenchmarkOneShardVsPlainPooled(b *testing.B) { oneShardVsPlain(b, true) }

// pooledBenchStatements is max_prepared_statements for the pooled
// benchmark: above the plugin's two caches of one-shard statements of a
// connection, so that PgBouncer closes none of them.
const pooledBenchStatements = 5000

func oneShardVsPlain(b *testing.B, pooled bool) {
	ctx := context.Background()
	opts := envOpts{shards: idgen.DefaultShards, serial: true, cfg: func(c *Config) {
		c.MaxOpenConns, c.MaxIdleConns = 1, 1
		if pooled {
			c.PreparedReads = PreparedReadsAlways
		}
	}}
	pooler := pgbouncer.Options{PreparedStatements: pooledBenchStatements, Settings: map[string]string{"default_pool_size": "1"}}
	if pooled {
		if _, err := pgbouncer.PreparedBinary(); err != nil {
			b.Skip(err)
		}
		opts.appDSN = viaPooler(b, pooler)
	}
	e := newEnv(b, opts)
	pc, err := pgtest.Set(b).Add(ctx, pglocal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pc.Stop() })
	plainDSN := pc.DSN("postgres")
	pgtest.Exec(b, plainDSN, plainPhotosDDL)
	plainApp := plainDSN
	if pooled {
		plainApp = bouncerFor(b, map[string]*pgbouncer.Bouncer{}, plainDSN, pooler).DSN("postgres")
	}
	plain, plainSQL := plainOnOneConn(b, plainApp)
	sharded := e.db

	const users, photosPerUser = 2000, 10
	seed := func(db *gorm.DB) []Photo {
		var all []Photo
		for range photosPerUser {
			for u := int64(1); u <= users; u++ {
				all = append(all, Photo{UserID: u, Caption: "seed"})
			}
		}
		if err := db.Session(&gorm.Session{SkipDefaultTransaction: true}).CreateInBatches(&all, 1000).Error; err != nil {
			b.Fatal(err)
		}
		pick := rand.New(rand.NewPCG(3, 4))
		one := make([]Photo, users)
		for u := range one {
			one[u] = all[pick.IntN(photosPerUser)*users+u]
		}
		return one
	}
	sp, pp := seed(sharded), seed(plain)
	for _, dsn := range []string{plainDSN, e.dsn["a"], e.dsn["b"]} {
		pgtest.Exec(b, dsn, "ANALYZE")
	}
	snap := e.r.Snapshot()
	servers := map[string]*sql.DB{}
	for _, name := range e.servers {
		srv, err := e.p.pools.get(snap, name)
		if err != nil {
			b.Fatal(err)
		}
		servers[name] = srv.DB
	}
	shardedPIDs := func() []int {
		var pids []int
		for _, name := range e.servers {
			pids = append(pids, backendPID(b, servers[name]))
		}
		return pids
	}
	plainPIDs := func() []int { return []int{backendPID(b, plainSQL)} }

	r := rand.New(rand.NewPCG(1, 2))
	pick := make([]int, 1<<16)
	for i := range pick {
		pick[i] = r.IntN(users)
	}
	blocks, n := envInt("SHARDKIT_BENCH_BLOCKS", oneShardBlocks), envInt("SHARDKIT_BENCH_BLOCK", oneShardBlock)

	ops := []struct {
		name string
		fn   func(db *gorm.DB, rows []Photo, i int) error
	}{
		{"select_by_key", func(db *gorm.DB, rows []Photo, i int) error {
			var p Photo
			return db.Where("user_id = ?", rows[i].UserID).Take(&p).Error
		}},
		{"select_by_id", func(db *gorm.DB, rows []Photo, i int) error {
			var p Photo
			return db.First(&p, rows[i].ID).Error
		}},
		{"insert", func(db *gorm.DB, rows []Photo, i int) error {
			return db.Create(&Photo{UserID: rows[i].UserID, Caption: "one"}).Error
		}},
		{"update_by_id", func(db *gorm.DB, rows []Photo, i int) error {
			return db.Model(&Photo{ID: rows[i].ID}).Update("caption", "u").Error
		}},
	}
	report := func(b *testing.B, f []blockFigures) {
		s, p := f[0], f[1]
		b.ReportMetric(float64(s.wall.Nanoseconds()), "sharded-ns/stmt")
		b.ReportMetric(float64(p.wall.Nanoseconds()), "plain-ns/stmt")
		b.ReportMetric(float64(s.client.Nanoseconds()), "sharded-cpu-ns/stmt")
		b.ReportMetric(float64(p.client.Nanoseconds()), "plain-cpu-ns/stmt")
		b.ReportMetric(float64(s.server.Nanoseconds()), "sharded-server-ns/stmt")
		b.ReportMetric(float64(p.server.Nanoseconds()), "plain-server-ns/stmt")
		b.ReportMetric(float64(s.sys.Nanoseconds()), "sharded-sys-ns/stmt")
		b.ReportMetric(float64(p.sys.Nanoseconds()), "plain-sys-ns/stmt")
		b.ReportMetric(s.sleeps, "sharded-sleeps/stmt")
		b.ReportMetric(p.sleeps, "plain-sleeps/stmt")
		b.ReportMetric(float64(s.wall)/float64(p.wall), "ratio")
		b.ReportMetric(float64(s.client)/float64(p.client), "cpu-ratio")
		b.ReportMetric(float64(s.server)/float64(p.server), "server-ratio")
	}
	// Warm: each side's statements, reads and writes, run on its
	// connection warmRounds times a row, so that the blocks measure the
	// steady state of a long-running service (catalog caches filled,
	// pages in shared buffers, each shard's prepared statements past the
	// executions after which Postgres may plan them once for all), not
	// the first touches.
	for _, side := range []struct {
		db   *gorm.DB
		rows []Photo
	}{{sharded, sp}, {plain, pp}} {
		for range warmRounds {
			for i := range side.rows {
				for _, o := range ops {
					if err := o.fn(side.db, side.rows, i); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	// prepares counts the one-shard statements the sharded side's
	// backends prepared since from: the misses of the plugin's caches that
	// they still hold.
	prepares := func(b *testing.B, from map[string]time.Time) int {
		n := 0
		for _, name := range e.servers {
			var k int
			if err := servers[name].QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'shardkit\_one\_%' AND prepare_time >= $1`, from[name]).Scan(&k); err != nil {
				b.Fatal(err)
			}
			n += k
		}
		return n
	}
	serverNow := func(b *testing.B) map[string]time.Time {
		at := map[string]time.Time{}
		for _, name := range e.servers {
			var t time.Time
			if err := servers[name].QueryRow(`SELECT clock_timestamp()`).Scan(&t); err != nil {
				b.Fatal(err)
			}
			at[name] = t
		}
		return at
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			from := serverNow(b)
			f := inBlocks(b, blocks, n, pick,
				oneSide{run: func(i int) error { return o.fn(sharded, sp, i) }, pids: shardedPIDs},
				oneSide{run: func(i int) error { return o.fn(plain, pp, i) }, pids: plainPIDs})
			report(b, f)
			if !pooled { // behind PgBouncer the server's statements carry its names
				b.ReportMetric(float64(prepares(b, from)), "sharded-prepared-in-run")
			}
		})
	}

	if pooled {
		return
	}
	// The split of a select by ID, each part against plain GORM.
	var onA []Photo // the rows of server a's shards
	for _, p := range sp {
		if pl, _ := snap.Placement(e.shardOf(p.UserID)); pl.Server == "a" {
			onA = append(onA, p)
		}
	}
	qualified := func(p Photo) string { return fmt.Sprintf(`"shard_%04d"."photos"`, e.shardOf(p.UserID)) }
	byID := func(db *sql.DB, table string, id int64, args ...any) error {
		var got, user int64
		return db.QueryRow(`SELECT id, user_id FROM `+table+` WHERE id = $1`, append(args, id)...).Scan(&got, &user)
	}
	asRead := context.WithValue(ctx, stmtOptsKey{}, stmtOpts{prepare: true}) // from the plugin's cache of one-shard reads
	aPIDs := func() []int { return []int{backendPID(b, servers["a"])} }
	plainByID := oneSide{run: func(i int) error { var p Photo; return plain.First(&p, pp[i].ID).Error }, pids: plainPIDs}
	splits := []struct {
		name string
		side oneSide
	}{
		{"plain_sql_prepared", oneSide{run: func(i int) error { return byID(plainSQL, "photos", pp[i].ID) }, pids: plainPIDs}},
		{"sql_unnamed", oneSide{run: func(i int) error { p := onA[i%len(onA)]; return byID(servers["a"], qualified(p), p.ID) }, pids: aPIDs}},
		{"sql_prepared", oneSide{run: func(i int) error {
			p := onA[i%len(onA)]
			var got, user int64
			return servers["a"].QueryRowContext(asRead, `SELECT id, user_id FROM `+qualified(p)+` WHERE id = $1`, p.ID).Scan(&got, &user)
		}, pids: aPIDs}},
		{"plugin_one_shard", oneSide{run: func(i int) error { var p Photo; return sharded.First(&p, onA[0].ID).Error }, pids: aPIDs}},
		{"plugin_server_a", oneSide{run: func(i int) error { var p Photo; return sharded.First(&p, onA[i%len(onA)].ID).Error }, pids: aPIDs}},
		{"sql_unnamed_one_shard", oneSide{run: func(i int) error { p := onA[0]; return byID(servers["a"], qualified(p), p.ID) }, pids: aPIDs}},
		{"sql_prepared_one_shard", oneSide{run: func(i int) error { p := onA[0]; return byID(servers["a"], qualified(p), p.ID, asPrepared) }, pids: aPIDs}},
	}
	// The split of an update by ID, each part against plain GORM's: raw
	// SQL in a transaction (BEGIN, the UPDATE, COMMIT, as GORM runs it) on
	// plain GORM's pool, prepared from pgx's cache; on a shard server,
	// random shards, unnamed; the same prepared from the plugin's cache of
	// writes.
	update := func(ctx context.Context, db *sql.DB, table string, id int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+table+` SET "caption"=$1 WHERE "id" = $2`, "u", id); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	asWrite := context.WithValue(ctx, stmtOptsKey{}, stmtOpts{prepare: true, write: true})
	plainUpdate := oneSide{run: func(i int) error { return plain.Model(&Photo{ID: pp[i].ID}).Update("caption", "u").Error }, pids: plainPIDs}
	updates := []struct {
		name string
		side oneSide
	}{
		{"update_plain_sql_prepared", oneSide{run: func(i int) error { return update(ctx, plainSQL, "photos", pp[i].ID) }, pids: plainPIDs}},
		{"update_sql_unnamed", oneSide{run: func(i int) error { p := onA[i%len(onA)]; return update(ctx, servers["a"], qualified(p), p.ID) }, pids: aPIDs}},
		{"update_sql_prepared", oneSide{run: func(i int) error { p := onA[i%len(onA)]; return update(asWrite, servers["a"], qualified(p), p.ID) }, pids: aPIDs}},
	}
	// And an insert, as GORM sends it (the plugin's ID in Go; plain
	// GORM's from its table's identity, read back), in raw SQL in a
	// transaction, prepared: on plain GORM's pool, and on a shard
	// server's random shards.
	insert := func(ctx context.Context, db *sql.DB, query string, args ...any) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var id int64
		if err := tx.QueryRowContext(ctx, query, args...).Scan(&id); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	now := time.Now()
	plainInsert := oneSide{run: func(i int) error { return plain.Create(&Photo{UserID: pp[i].UserID, Caption: "one"}).Error }, pids: plainPIDs}
	inserts := []struct {
		name string
		side oneSide
	}{
		{"insert_plain_sql_prepared", oneSide{run: func(i int) error {
			return insert(ctx, plainSQL, `INSERT INTO "photos" ("user_id","caption","likes","created_at") VALUES ($1,$2,$3,$4) RETURNING "id"`, pp[i].UserID, "one", 0, now)
		}, pids: plainPIDs}},
		{"insert_sql_prepared", oneSide{run: func(i int) error {
			p := onA[i%len(onA)]
			id, err := e.p.cfg.IDs.Next(ctx, e.shardOf(p.UserID))
			if err != nil {
				return err
			}
			return insert(asWrite, servers["a"], `INSERT INTO `+qualified(p)+` ("user_id","caption","likes","created_at","id") VALUES ($1,$2,$3,$4,$5) RETURNING "id"`, p.UserID, "one", 0, now, id)
		}, pids: aPIDs}},
	}
	for _, s := range inserts {
		for range warmRounds {
			for i := range onA {
				if err := s.side.run(i); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run("split/"+s.name, func(b *testing.B) {
			report(b, inBlocks(b, blocks, n, pick, s.side, plainInsert))
		})
	}

	for _, s := range updates {
		for i := range onA {
			if err := s.side.run(i); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("split/"+s.name, func(b *testing.B) {
			report(b, inBlocks(b, blocks, n, pick, s.side, plainUpdate))
		})
	}

	for _, s := range splits {
		// warmRounds runs each: past the executions after which Postgres
		// may plan a prepared statement once for all.
		for range warmRounds {
			for i := range onA {
				if err := s.side.run(i); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run("split/"+s.name, func(b *testing.B) {
			report(b, inBlocks(b, blocks, n, pick, s.side, plainByID))
		})
	}
}
