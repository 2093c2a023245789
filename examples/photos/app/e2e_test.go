package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/shardsql"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// Cluster 0 holds the catalog; clusters 1 and 2 are the shard servers.
func TestMain(m *testing.M) { pgtest.Main(m, 3) }

// fixture is the photo service on a catalog and two servers with all 2000
// logical shards, behind an httptest server, plus direct connections to
// every database for checking where rows landed.
type fixture struct {
	t      testing.TB
	url    string
	app    *app.App
	layout idgen.Layout
	// operator is the catalog as the operator opens it (the superuser's
	// DSN): moves, and what the service may not do.
	operator *catalog.Catalog
	catalog  *pgx.Conn            // as the superuser
	servers  map[string]*pgx.Conn // by server name, not through shardkit
}

var serverNames = []string{"alpha", "beta"}

func newFixture(t *testing.T) *fixture { return newFixtureShards(t, 2000) }

// newFixtureShards is newFixture with the given number of logical shards.
func newFixtureShards(t testing.TB, shards int) *fixture { return newFixtureOn(t, shards, nil) }

// newFixtureOn is newFixtureShards with some servers' databases given by
// dsnOf (by server name; "" for a database on the shared clusters).
func newFixtureOn(t testing.TB, shards int, dsnOf func(server string) string) *fixture {
	t.Helper()
	// Provisioned as app.Provision does (the service's shard SQL), once
	// per shape, each test getting copies; TestCatalogOutage runs
	// app.Provision itself. alpha is on cluster 1, beta on cluster 2.
	start := time.Now()
	// The servers are registered as an operator registers them for an
	// application role: the app DSN logs in as shardtest.AppLogin (a
	// member of the catalog's application role), the admin DSN as the
	// superuser. The service gets the app DSNs alone.
	se := shardtest.New(t, shardtest.Spec{Servers: serverNames, Clusters: []int{1, 2}, Shards: shards, ShardSQL: shardsql.FS, DSN: dsnOf, AppRole: true})
	t.Logf("%d shards on 2 servers ready in %s", shards, time.Since(start).Round(time.Millisecond))
	catDSN := se.CatalogDSN
	cfg := asApp(t, app.Config{Catalog: store.CatalogDSN(catDSN), Shards: shards, FenceWait: store.FenceWait(2 * time.Second), Servers: se.Servers})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := serve(t, cfg, log)
	f.operator = se.Catalog
	f.catalog, f.servers = pgtest.Connect(t, catDSN), map[string]*pgx.Conn{}
	for _, s := range se.Servers {
		f.servers[s.Name] = pgtest.Connect(t, se.DSN[s.Name])
	}
	return f
}

// asApp is cfg (provisioned by the operator, with the superuser's DSNs)
// as the service runs: its catalog DSN logs in as shardtest.AppLogin, and
// it holds the servers' application DSNs only (the catalog gives the
// router those anyway; the service provisions nothing).
func asApp(t testing.TB, cfg app.Config) app.Config {
	t.Helper()
	cfg.Catalog = store.CatalogDSN(shardtest.AppDSN(t, string(cfg.Catalog)))
	cfg.Provision, cfg.ProvisionOnly = false, false
	servers := make([]migrations.ServerSpec, len(cfg.Servers))
	for i, s := range cfg.Servers {
		servers[i] = migrations.ServerSpec{Name: s.Name, DSN: s.DSN}
	}
	cfg.Servers = servers
	return cfg
}

// serve initializes the service of cfg behind an httptest server, both
// closed when the test ends.
func serve(t testing.TB, cfg app.Config, log *slog.Logger) *fixture {
	t.Helper()
	a, cleanup, err := app.Initialize(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	t.Cleanup(cleanup)
	srv := httptest.NewServer(a.Server.Handler)
	t.Cleanup(srv.Close)
	return &fixture{t: t, url: srv.URL, app: a, layout: a.Router.Snapshot().Layout}
}

// call sends a request and decodes the JSON answer into out (when not nil);
// it returns the status.
func (f *fixture) call(t *testing.T, method, path string, in, out any) int {
	t.Helper()
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = b
	}
	code, data := f.raw(t, method, path, body)
	if out != nil && code/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return code
}

// mustCall is call that fails the test unless the status is want.
func (f *fixture) mustCall(t *testing.T, want int, method, path string, in, out any) {
	t.Helper()
	if got := f.call(t, method, path, in, out); got != want {
		t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// home returns the shard and server of an ID, from the catalog's map read
// directly.
func (f *fixture) home(t *testing.T, id int64) (int, string) {
	t.Helper()
	shard, err := f.layout.ShardOf(id)
	if err != nil {
		t.Fatal(err)
	}
	var server string
	if err := f.catalog.QueryRow(context.Background(), `SELECT server FROM shardkit.shard_map WHERE shard = $1`, shard).Scan(&server); err != nil {
		t.Fatalf("catalog: shard %d: %v", shard, err)
	}
	return shard, server
}

// rowsAt counts rows of table in a shard's schema on one server, directly;
// -1 when the schema does not exist there.
func (f *fixture) rowsAt(t *testing.T, server string, shard int, table, where string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	conn := f.servers[server]
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, router.SchemaName(shard)).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return -1
	}
	var n int
	q := "SELECT count(*) FROM " + pgx.Identifier{router.SchemaName(shard), table}.Sanitize() + " WHERE " + where
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", server, q, err)
	}
	return n
}

// assertPlaced checks that exactly one row matching where is in
// shard_NNNN.table on the server the map names, and that the shard's
// schema does not exist on the other server.
func (f *fixture) assertPlaced(t *testing.T, shard int, server, table, where string, args ...any) {
	t.Helper()
	for name := range f.servers {
		n := f.rowsAt(t, name, shard, table, where, args...)
		switch {
		case name == server && n != 1:
			t.Errorf("%s: %d rows in %s.%s where %s %v, want 1", name, n, router.SchemaName(shard), table, where, args)
		case name != server && n != -1:
			t.Errorf("%s: schema %s exists on %s too (%d matching rows); it must live only on %s", table, router.SchemaName(shard), name, n, server)
		}
	}
}

func id(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("ID %q: %v", s, err)
	}
	return v
}

type userJSON struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Username string `json:"username"`
}

type photoJSON struct {
	ID      string `json:"id"`
	UserID  string `json:"user_id"`
	Caption string `json:"caption"`
	URL     string `json:"url"`
}

type pageJSON[T any] struct {
	Items      []T    `json:"items"`
	NextBefore string `json:"next_before"`
}

// createUsers makes users until there is one on each server, and returns
// one user per server in serverNames order.
func (f *fixture) createUsers(t *testing.T) []userJSON {
	t.Helper()
	found := map[string]userJSON{}
	for i := 0; len(found) < len(serverNames); i++ {
		if i == 64 {
			t.Fatalf("64 users and still not one on each server: %v", found)
		}
		var u userJSON
		f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": fmt.Sprintf("user %d", i)}, &u)
		if u.Name != fmt.Sprintf("user %d", i) {
			t.Fatalf("created user %+v", u)
		}
		uid := id(t, u.ID)
		shard, server := f.home(t, uid)
		f.assertPlaced(t, shard, server, "users", "id = $1 AND name = $2", uid, u.Name)
		var got userJSON
		f.mustCall(t, http.StatusOK, "GET", "/users/"+u.ID, nil, &got)
		if got != u {
			t.Fatalf("GET user: %+v, created %+v", got, u)
		}
		if _, ok := found[server]; !ok {
			found[server] = u
		}
	}
	out := make([]userJSON, len(serverNames))
	for i, name := range serverNames {
		out[i] = found[name]
	}
	return out
}
