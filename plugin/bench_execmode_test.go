package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/procmem"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// BenchmarkExecModes measures the statement execution modes of the
// default OpenDB on 2000 logical shards over two servers, each against
// plain GORM on one unsharded table of the same rows, in the same run:
//
//   - exec: the default (unnamed statements, nothing cached)
//   - prepared: StatementCacheCapacity 4096 (named prepared statements)
//   - cache_describe: unnamed statements, descriptions cached per connection
//   - cache_describe_misses: the same with a cache of one description, as a
//     full cache behaves when a service's shapes times shards outnumber it
//   - exec_pooled and cache_describe_pooled: each server behind PgBouncer
//     in transaction mode
//
// Each mode first touches every shard (a select by key and an insert for
// every user, warmRounds times: past the executions after which Postgres
// may plan a prepared statement once for all), one statement after
// another, as a service does over time; then the private memory (RssAnon) of the
// servers' backends serving it is read from /proc, and select by key
// and insert are timed, paired with plain GORM statement by statement.
//
//	go test ./plugin -run '^$' -bench BenchmarkExecModes -benchtime 3000x
func BenchmarkExecModes(b *testing.B) {
	needPgBouncer(b)
	ctx := context.Background()
	e := newEnv(b, envOpts{shards: idgen.DefaultShards})
	plainDSN := pgtest.NewDatabase(b, 0)
	pgtest.Exec(b, plainDSN, plainPhotosDDL)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	const users = idgen.DefaultShards // user u lives in shard u mod 2000: every shard
	seed := func() []Photo {
		var rows []Photo
		for u := int64(1); u <= users; u++ {
			rows = append(rows, Photo{UserID: u, Caption: "seed"})
		}
		return rows
	}
	if err := plain.CreateInBatches(seed(), 1000).Error; err != nil {
		b.Fatal(err)
	}
	if err := e.db.Session(&gorm.Session{SkipDefaultTransaction: true}).CreateInBatches(seed(), 1000).Error; err != nil {
		b.Fatal(err)
	}
	for _, dsn := range []string{plainDSN, e.dsn["a"], e.dsn["b"]} {
		pgtest.Exec(b, dsn, "ANALYZE")
	}
	// The seeding plugin's connections would count as the modes' backends.
	if err := e.p.Close(); err != nil {
		b.Fatal(err)
	}
	for _, server := range e.servers {
		waitNoBackends(b, ctx, e.dsn[server])
	}
	// The same map with each server's DSN pointing at a PgBouncer in
	// front of it.
	bouncers := map[string]*pgbouncer.Bouncer{}
	snap := e.r.Snapshot()
	var pooledServers []router.Server
	for _, s := range snap.Servers() {
		u, _ := url.Parse(e.dsn[s.Name])
		pooledServers = append(pooledServers, behindPooler(s, bouncerFor(b, bouncers, e.dsn[s.Name], pgbouncer.Options{}).DSN(strings.TrimPrefix(u.Path, "/"))))
	}
	pooledSnap, err := router.NewSnapshot(snap.Version, snap.Shards, pooledServers, snap.Placements())
	if err != nil {
		b.Fatal(err)
	}
	pooledSnap.Layout = snap.Layout
	pooledMap, err := router.NewFixed(pooledSnap)
	if err != nil {
		b.Fatal(err)
	}
	modes := []struct {
		name string
		cfg  Config
	}{
		{"prepared", Config{Router: e.r, StatementCacheCapacity: defaultStatementCacheCapacity}},
		{"cache_describe", Config{Router: withDSNParams(b, snap, "default_query_exec_mode=cache_describe")}},
		{"cache_describe_misses", Config{Router: withDSNParams(b, snap, "default_query_exec_mode=cache_describe&description_cache_capacity=1")}},
		{"exec", Config{Router: e.r}},
		{"cache_describe_pooled", Config{Router: withDSNParams(b, pooledSnap, "default_query_exec_mode=cache_describe")}},
		{"exec_pooled", Config{Router: pooledMap}},
	}
	pick := rand.New(rand.NewPCG(1, 2))
	ms := &measured{m: map[string][2]float64{}}
	for _, m := range modes {
		m.cfg.IDs = e.gen
		m.cfg.WarmUp = WarmUpOff // the touch below is the warm-up, the same for every mode
		def, err := sql.Open("pgx", e.def)
		if err != nil {
			b.Fatal(err)
		}
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: def}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			b.Fatal(err)
		}
		p := Register(m.cfg, &Photo{})
		if err := db.Use(p); err != nil {
			b.Fatal(err)
		}
		selectByKey := func(db *gorm.DB, u int64) error {
			var got Photo
			return db.Where("user_id = ?", u).Take(&got).Error
		}
		insert := func(db *gorm.DB, u int64) error {
			return db.Create(&Photo{UserID: u, Caption: "one"}).Error
		}
		for range warmRounds {
			for u := int64(1); u <= users; u++ {
				if err := selectByKey(db, u); err != nil {
					b.Fatal(err)
				}
				if err := insert(db, u); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, server := range e.servers {
			mem := backendMemory(b, ctx, e.dsn[server])
			b.Logf("%s, server %s: %s", m.name, server, mem)
		}
		for u := int64(1); u <= users; u++ { // the plain side as warm
			if err := selectByKey(plain, u); err != nil {
				b.Fatal(err)
			}
		}
		ms.paired(b, "select_by_key/"+m.name,
			func(int) error { return selectByKey(db, 1+pick.Int64N(users)) },
			func(int) error { return selectByKey(plain, 1+pick.Int64N(users)) })
		ms.paired(b, "insert/"+m.name,
			func(int) error { return insert(db, 1+pick.Int64N(users)) },
			func(int) error { return insert(plain, 1+pick.Int64N(users)) })
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		_ = def.Close()
		for _, bc := range bouncers { // the next mode starts with no server connections
			pgbouncerReconnect(b, bc)
		}
		for _, server := range e.servers {
			waitNoBackends(b, ctx, e.dsn[server])
		}
	}
}

// withDSNParams is a router on snap with params added to every server's
// DSN (a URL).
func withDSNParams(b *testing.B, snap *router.Snapshot, params string) *router.Router {
	b.Helper()
	var servers []router.Server
	for _, s := range snap.Servers() {
		s.DSN += "&" + params
		servers = append(servers, s)
	}
	next, err := router.NewSnapshot(snap.Version, snap.Shards, servers, snap.Placements())
	if err != nil {
		b.Fatal(err)
	}
	next.Layout = snap.Layout
	r, err := router.NewFixed(next)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// backendMemory sums up the private memory (RssAnon, not the shared
// buffers) of the backends connected to a database, other than the
// caller's own.
func backendMemory(b *testing.B, ctx context.Context, dsn string) string {
	b.Helper()
	conn := pgtest.Connect(b, dsn)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var sum, top int64
	for _, pid := range pids {
		mb, _ := procmem.RssAnonMB(int(pid)) // 0 when the backend is gone
		kb := int64(mb * 1024)
		sum += kb
		top = max(top, kb)
	}
	_ = conn.Close(ctx)
	return fmt.Sprintf("%d backends, RssAnon max %.1f MB, total %.1f MB", len(pids), float64(top)/1024, float64(sum)/1024)
}

// pgbouncerReconnect closes PgBouncer's server connections (RECONNECT on
// its admin console), so that the next mode's backends are new.
func pgbouncerReconnect(b *testing.B, bc *pgbouncer.Bouncer) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, bc.DSN("pgbouncer"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "RECONNECT", pgx.QueryExecModeSimpleProtocol); err != nil {
		b.Fatal(err)
	}
}

// waitNoBackends waits until no client backend but the caller's is
// connected to the database.
func waitNoBackends(b *testing.B, ctx context.Context, dsn string) {
	b.Helper()
	conn := pgtest.Connect(b, dsn)
	defer conn.Close(ctx)
	testkit.Until(b, time.Minute, func() error {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n > 0 {
			return fmt.Errorf("%d backends still connected", n)
		}
		return nil
	})
}
