package rebalance

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// childEnv marks a re-executed test binary that runs one mover and is
// killed by its own hook (kill_test.go); it needs no clusters of its own.
const childEnv = "SHARDKIT_REBALANCE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run())
	}
	pgtest.Main(m, 4)
}

// testSQL is the tests' shared per-shard SQL (photos, likes, follows).
var testSQL = photos.SQL

// env is a provisioned catalog with n servers (a fresh database on each of
// n clusters) and the given shard count, shards spread over the first
// `used` servers; the rest are registered empty.
type env struct {
	catalogDSN string
	cat        *catalog.Catalog
	servers    []migrations.ServerSpec
	pools      map[string]*pgxpool.Pool // the operator's
	direct     map[string]string        // server → the operator's DSN
	shards     int
}

// serverDSN is a server's direct DSN, the operator's.
func (e *env) serverDSN(t testing.TB, server string) string {
	t.Helper()
	dsn, ok := e.direct[server]
	if !ok {
		t.Fatalf("no server %s", server)
	}
	return dsn
}

// tuneOnce shortens wal_retrieve_retry_interval on the test clusters: the
// logical replication launcher waits that long (default 5s) between starts
// of apply workers, which would dominate a test of many consecutive moves.
var tuneOnce sync.Once

func newEnv(t testing.TB, n, used, shards int) *env {
	t.Helper()
	return newEnvSpec(t, n, used, shards, false)
}

// newAppEnv is newEnv with the servers' application DSNs on the
// application role (shardtest.Spec.AppRole); the env's pools stay the
// operator's.
func newAppEnv(t testing.TB, n, used, shards int) *env {
	t.Helper()
	return newEnvSpec(t, n, used, shards, true)
}

// tuneShared applies tuneOnce to the shared clusters; a test that adds
// clusters of its own calls it before.
func tuneShared(t testing.TB) {
	t.Helper()
	tuneOnce.Do(func() {
		for i := range pgtest.Set(t).Clusters {
			dsn := pgtest.Cluster(t, i).DSN("postgres")
			pgtest.Exec(t, dsn, `ALTER SYSTEM SET wal_retrieve_retry_interval = '100ms'`)
			pgtest.Exec(t, dsn, `SELECT pg_reload_conf()`)
		}
	})
}

func newEnvSpec(t testing.TB, n, used, shards int, app bool) *env {
	t.Helper()
	tuneShared(t)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%d", i)) // on cluster i%4
	}
	return newEnvFrom(t, shardtest.Spec{Servers: names, Shards: shards, Used: used, ShardSQL: testSQL, AppRole: app})
}

// newEnvFrom is newEnv of a spec of the caller's (servers on clusters of
// a test's own: Spec.DSN).
func newEnvFrom(t testing.TB, spec shardtest.Spec) *env {
	t.Helper()
	ctx := context.Background()
	se := shardtest.New(t, spec)
	shards := spec.Shards
	e := &env{catalogDSN: se.CatalogDSN, cat: se.Catalog, servers: se.Servers, shards: shards, pools: map[string]*pgxpool.Pool{}, direct: se.DSN}
	for _, s := range e.servers {
		p, err := pgxpool.New(ctx, se.DSN[s.Name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		e.pools[s.Name] = p
	}
	return e
}

func (e *env) mover(t testing.TB, cfg Config) *Mover {
	t.Helper()
	cfg.Catalog = e.cat
	mv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mv.Close)
	return mv
}

func (e *env) placement(t testing.TB, shard int) router.Placement {
	t.Helper()
	snap, err := e.cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, err := snap.Placement(shard)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leftovers returns replication slots, publications and subscriptions on
// every server: after a finished move there must be none.
func (e *env) leftovers(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, s := range e.servers {
		p := e.pools[s.Name]
		for _, q := range []string{
			`SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = current_database()`,
			`SELECT 'publication ' || pubname FROM pg_publication`,
			`SELECT 'subscription ' || subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		} {
			rows, err := p.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var x string
				if err := rows.Scan(&x); err != nil {
					t.Fatal(err)
				}
				out = append(out, s.Name+": "+x)
			}
			rows.Close()
		}
	}
	return out
}

// leftoversOf is leftovers, only those of shard's moves (objects named
// shardkit_<kind>_<shard>_<move>[_<tag>]).
func (e *env) leftoversOf(t *testing.T, shard int) []string {
	t.Helper()
	var out []string
	for _, l := range e.leftovers(t) {
		_, name, _ := strings.Cut(l[strings.Index(l, ": ")+2:], " ")
		if parts := strings.Split(name, "_"); len(parts) >= 4 && parts[2] == strconv.Itoa(shard) {
			out = append(out, l)
		}
	}
	return out
}

// schemaOn reports whether a shard's schema exists on a server.
func (e *env) schemaOn(t *testing.T, server string, shard int) bool {
	t.Helper()
	ok, err := schemaExists(context.Background(), e.pools[server], router.SchemaName(shard))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
