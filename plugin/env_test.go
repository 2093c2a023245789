package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/router"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// testSQL is the shared photos schema, the lookup tests' members, and the
// plugin's own models' tables (testdata/shardsql: albums, accounts).
var testSQL = photos.With(photos.Members, os.DirFS("testdata/shardsql"))

// Photo is the shared photos table (photos.Photo) as the plugin's tests
// need it: a hook that takes the shard key from the caption, and its likes
// as an association, neither of which a shared model can carry.
type Photo struct {
	ID        int64
	UserID    int64 `shard:"key"`
	Caption   string
	Likes     int
	CreatedAt time.Time
	LikeRows  []Like `gorm:"foreignKey:PhotoID"`
}

// BeforeCreate lets a test set the shard key in a hook: caption "user:N".
func (p *Photo) BeforeCreate(*gorm.DB) error {
	if p.UserID == 0 && strings.HasPrefix(p.Caption, "user:") {
		_, err := fmt.Sscanf(p.Caption, "user:%d", &p.UserID)
		return err
	}
	return nil
}

// Like lives in its photo's shard.
type Like struct {
	ID        int64
	UserID    int64
	PhotoID   int64 `shard:"id"`
	CreatedAt time.Time
	Photo     *Photo
}

// env is a catalog, two shard servers on two clusters, a router, an ID
// generator and a gorm.DB whose default connection is an empty database.
type env struct {
	cat     *catalog.Catalog
	catDSN  string
	r       *router.Router
	gen     *idgen.Generator
	db      *gorm.DB
	p       *Plugin
	dsn     map[string]string // server name → DSN
	def     string            // the default connection's DSN
	defPool *countingPool     // the default connection, counting its use
	shards  int
	servers []string
}

type envOpts struct {
	shards int
	noIDs  bool
	cfg    func(*Config)
	before func(*env)                 // runs before the router and the plugin are made
	one    bool                       // one server (cluster 0) instead of two
	four   bool                       // four servers (databases on the two clusters) instead of two
	dsnOf  func(server string) string // a server's database, when not on the shared clusters ("" for those)
	models []any                      // models registered besides the default ones
	// appDSN gives the DSN the plugin connects to a server with (a
	// pooler in front of it), from its direct DSN; "" or nil keeps the
	// direct one. Provisioning and the tests' own checks use the direct
	// DSN (env.dsn).
	appDSN func(server, direct string) string
	// gorm adjusts the gorm.Config of env.db (PrepareStmt, …).
	gorm func(*gorm.Config)
	// beside registers other plugins on env.db before the shardkit
	// plugin (dbresolver, …).
	beside func(*gorm.DB) error
	// serial keeps the test from running beside others: it measures
	// what the whole process does (allocations).
	serial bool
}

// parallel lets a top-level test run beside the package's other parallel
// tests, on databases of its own, unless it must not: it asks so
// (serial), it runs on a cluster of its own (which pgtest.Set.Add starts
// and the test stops) or behind poolers it starts and counts, or it is a
// subtest (whose siblings may share its state). Go runs every serial test
// before the parallel ones start.
func parallel(t testing.TB, o envOpts) {
	tt, ok := t.(*testing.T)
	if !ok || o.serial || o.dsnOf != nil || o.appDSN != nil || strings.Contains(t.Name(), "/") {
		return
	}
	if _, again := parallelTests.LoadOrStore(tt, true); !again {
		tt.Parallel()
	}
}

// parallelTests are the tests parallel has made parallel (a test may
// build two environments).
var parallelTests sync.Map

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	parallel(t, o)
	ctx := context.Background()
	if o.shards == 0 {
		o.shards = 16
	}
	e := &env{shards: o.shards, dsn: map[string]string{}, servers: []string{"a", "b"}}
	if o.one {
		e.servers = e.servers[:1]
	}
	if o.four {
		e.servers = []string{"a", "b", "c", "d"}
	}
	// Server i is on cluster i%2. The plugin goes through a pooler when
	// appDSN gives one (the server's DSN); provisioning connects directly
	// (its admin DSN).
	se := shardtest.New(t, shardtest.Spec{Servers: e.servers, Shards: o.shards, ShardSQL: testSQL,
		DSN: o.dsnOf, AppDSN: o.appDSN})
	e.catDSN, e.cat, e.dsn = se.CatalogDSN, se.Catalog, se.DSN
	var err error
	if o.before != nil {
		o.before(e)
	}
	if e.r, err = router.New(ctx, e.cat); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Router: e.r}
	if !o.noIDs {
		e.gen = se.Generator(t)
		cfg.IDs = e.gen
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	e.def = pgtest.NewDatabase(t, 1) // no tables: nothing may run here
	sqlDB, err := sql.Open("pgx", e.def)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	e.defPool = &countingPool{DB: sqlDB}
	gcfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
	if o.gorm != nil {
		o.gorm(gcfg)
	}
	e.db, err = gorm.Open(postgres.New(postgres.Config{Conn: e.defPool}), gcfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.beside != nil {
		if err := o.beside(e.db); err != nil {
			t.Fatal(err)
		}
	}
	e.p = Register(cfg, append([]any{&Photo{}, &Like{}, &Album{}, &Account{}}, o.models...)...)
	if err := e.db.Use(e.p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.p.Close() })
	e.defPool.calls.Store(0)
	return e
}

// openDB opens another gorm.DB on the environment's default database with
// cfg (its logger silenced) and a plugin of its own on the environment's
// router and IDs, for Photo and Like; both close when the test ends.
func (e *env) openDB(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	cfg.Logger = logger.Default.LogMode(logger.Silent)
	db, err := gorm.Open(postgres.Open(e.def), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pl := Register(Config{Router: e.r, IDs: e.gen}, &Photo{}, &Like{})
	if err := db.Use(pl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pl.Close()
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db
}

// shardOf is the shard of a user key.
func (e *env) shardOf(user int64) int { return int(user % int64(e.shards)) }

// serverOf names the server of a shard in the current map.
func (e *env) serverOf(t testing.TB, shard int) string {
	t.Helper()
	return shardtest.ServerOf(t, e.r, shard)
}

// locate finds, with direct connections to every server and not through
// the plugin, every server/schema whose table holds a row with this id.
func (e *env) locate(t testing.TB, table string, id int64) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	for _, name := range e.servers {
		conn := pgtest.Connect(t, e.dsn[name])
		rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = $1 ORDER BY 1`, table)
		if err != nil {
			t.Fatal(err)
		}
		schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, s := range schemas {
			parts = append(parts, fmt.Sprintf("SELECT %s::text FROM %s WHERE id = $1",
				quoteLiteral(s), pgx.Identifier{s, table}.Sanitize()))
		}
		if len(parts) == 0 {
			continue
		}
		rows, err = conn.Query(ctx, strings.Join(parts, " UNION ALL "), id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			found = append(found, name+"/"+s)
		}
	}
	return found
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// assertAt checks that the row with id is exactly in shard's schema, on
// the server the map places it on, and nowhere else.
func (e *env) assertAt(t testing.TB, table string, id int64, shard int) {
	t.Helper()
	want := e.serverOf(t, shard) + "/" + router.SchemaName(shard)
	if e.shards > 64 {
		e.assertAtDirect(t, table, id, shard)
		return
	}
	got := e.locate(t, table, id)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("%s id %d is at %v, want exactly [%s]", table, id, got, want)
	}
}

// assertAtDirect is assertAt for maps with many shards, where scanning
// every schema is slow: the row is in the shard's schema on its server,
// and the other servers do not hold that row in that schema.
func (e *env) assertAtDirect(t testing.TB, table string, id int64, shard int) {
	t.Helper()
	ctx := context.Background()
	home := e.serverOf(t, shard)
	q := "SELECT count(*) FROM " + pgx.Identifier{router.SchemaName(shard), table}.Sanitize() + " WHERE id = $1"
	for _, name := range e.servers {
		conn := pgtest.Connect(t, e.dsn[name])
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, router.SchemaName(shard)).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		n := 0
		if exists {
			if err := conn.QueryRow(ctx, q, id).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		if name == home && n != 1 || name != home && n != 0 {
			t.Fatalf("%s id %d: %d rows in %s on %s, want it only on %s", table, id, n, router.SchemaName(shard), name, home)
		}
	}
}

// assertAbsent checks that no server holds the row.
func (e *env) assertAbsent(t testing.TB, table string, id int64) {
	t.Helper()
	if e.shards > 64 {
		return // see the caller: it checks with assertAtDirect where the row was
	}
	if got := e.locate(t, table, id); len(got) != 0 {
		t.Fatalf("%s id %d is still at %v", table, id, got)
	}
}

// defaultUntouched checks that the default connection's database has no
// tables (nothing was created there) and saw no sharded statement.
func (e *env) defaultUntouched(t testing.TB) {
	t.Helper()
	conn := pgtest.Connect(t, e.def)
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("default database has %d tables", n)
	}
	if c := e.defPool.calls.Load(); c != 0 {
		t.Fatalf("the default connection was used %d times", c)
	}
}

// countingPool is the default connection: a real *sql.DB whose every use
// is counted, so tests can prove sharded statements never reach it.
type countingPool struct {
	*sql.DB
	calls atomic.Int64
}

// GetDBConn is part of gorm.GetDBConnector, which plugins such as
// dbresolver need of the default connection; it is not a statement.
func (c *countingPool) GetDBConn() (*sql.DB, error) { return c.DB, nil }

func (c *countingPool) PrepareContext(ctx context.Context, q string) (*sql.Stmt, error) {
	c.calls.Add(1)
	return c.DB.PrepareContext(ctx, q)
}

func (c *countingPool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.calls.Add(1)
	return c.DB.ExecContext(ctx, q, args...)
}

func (c *countingPool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	c.calls.Add(1)
	return c.DB.QueryContext(ctx, q, args...)
}

func (c *countingPool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.calls.Add(1)
	return c.DB.QueryRowContext(ctx, q, args...)
}

func (c *countingPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	c.calls.Add(1)
	return c.DB.BeginTx(ctx, opts)
}

// rawExec runs SQL on a server directly.
func (e *env) rawExec(t testing.TB, server, sql string, args ...any) {
	t.Helper()
	pgtest.Exec(t, e.dsn[server], sql, args...)
}

var gormSkipTx = gorm.Session{SkipDefaultTransaction: true}
