// Package shardtest builds what most of shardkit's database tests start
// from: a catalog database, servers (a database each on the package's
// test clusters) and shards provisioned on them by migrations.Provision.
// Each package keeps a small wrapper for what is its own (models, a
// plugin, movers).
//
//	e := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: 16})
//	ids := e.Generator(t)
//
// The shards hold the shared photos schema (package photos) unless a
// Spec says otherwise.
//
// Provisioning is paid once per package and shape: the first test of a
// shape provisions into template databases, and every test gets its own
// copies of them (pgtest.CloneDatabase), with the catalog pointed at the
// copies. A test sees what provisioning its own databases would have
// left (but for the map version, see New), and nothing of other tests.
package shardtest

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/approle"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// Spec is the shape of an environment.
type Spec struct {
	Servers []string // server names
	// Clusters gives the cluster of each server's database, by index
	// (nil: server i on cluster i modulo the clusters started). The
	// catalog is on cluster 0.
	Clusters []int
	Shards   int
	// ShardSQL is the per-shard SQL files (nil: photos.SQL, the shared
	// photos schema).
	ShardSQL fs.FS
	// Used provisions the shards onto the first Used servers only, and
	// registers the others empty (0: all servers).
	Used int
	// DSN gives a server's database when it is not a fresh one on the
	// shared clusters (a cluster of the test's own); "" or nil for those.
	// An environment with such a server is provisioned in full, without a
	// template.
	DSN func(server string) string
	// AppDSN gives the DSN application traffic reaches a server with (a
	// pooler in front of it), from its direct DSN; "" or nil keeps the
	// direct one. Provisioning and Env.DSN use the direct DSN.
	AppDSN func(server, direct string) string
	// AppRole registers each server's application DSN as the login role
	// AppLogin (a member of the catalog's application role,
	// catalog.DefaultAppRole) on the direct DSN, and the direct DSN, the
	// superuser's, as its admin DSN: routers then run as an application,
	// movers and provisioning as the operator. It takes the place of
	// AppDSN.
	AppRole bool
}

// AppLogin is the login role of Spec.AppRole and AppDSN: a member of
// catalog.DefaultAppRole with nothing of its own. The test clusters trust
// every local connection, so it needs no password.
const AppLogin = "shardkit_app_login"

// AppDSN is dsn (a test cluster's, as the superuser) as AppLogin, created
// on that cluster if it is missing (with the application role it is a
// member of).
func AppDSN(t testing.TB, dsn string) string {
	t.Helper()
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("shardtest: app DSN of %q: %v", dsn, err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("shardtest: app DSN: %v", err)
	}
	defer conn.Close(ctx)
	login := `DO $login$
BEGIN
    IF to_regrole('` + AppLogin + `') IS NULL THEN
        CREATE ROLE ` + AppLogin + ` LOGIN NOSUPERUSER IN ROLE ` + catalog.DefaultAppRole + `;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END $login$`
	for _, sql := range []string{approle.EnsureSQL(catalog.DefaultAppRole), login} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("shardtest: app role: %v", err)
		}
	}
	u.User = url.User(AppLogin)
	return u.String()
}

// Env is a provisioned catalog and its servers.
type Env struct {
	CatalogDSN string
	Catalog    *catalog.Catalog        // closed when the test ends
	Servers    []migrations.ServerSpec // as registered: DSN (application), AdminDSN (direct, when they differ)
	DSN        map[string]string       // server name → direct DSN
}

// New provisions an environment of spec (or copies one provisioned
// before) for the test; its databases are dropped when the test ends. A
// copied catalog's map version is past the provisioned one, by one for
// each server whose DSN it changed to the copy's.
func New(t testing.TB, spec Spec) *Env {
	t.Helper()
	if spec.Used == 0 {
		spec.Used = len(spec.Servers)
	}
	if spec.ShardSQL == nil {
		spec.ShardSQL = photos.SQL
	}
	clusters := make([]int, len(spec.Servers))
	for i := range spec.Servers {
		if spec.Clusters != nil {
			clusters[i] = spec.Clusters[i]
		} else {
			clusters[i] = i % len(pgtest.Set(t).Clusters)
		}
	}
	own := map[string]string{}
	if spec.DSN != nil {
		for _, name := range spec.Servers {
			if dsn := spec.DSN(name); dsn != "" {
				own[name] = dsn
			}
		}
	}
	e := &Env{DSN: map[string]string{}}
	var ts *templateSet
	if len(own) == 0 {
		ts = templatesFor(t, spec, clusters)
	}
	if ts == nil {
		// Databases of the test's own clusters, or a shape met for the
		// first time: provisioned here, without a template.
		e.CatalogDSN = pgtest.NewDatabase(t, 0)
		for i, name := range spec.Servers {
			if e.DSN[name] = own[name]; e.DSN[name] == "" {
				e.DSN[name] = pgtest.NewDatabase(t, clusters[i])
			}
		}
		e.open(t)
		e.register(t, spec)
		if err := provision(context.Background(), e.Catalog, spec, e.Servers); err != nil {
			t.Fatalf("shardtest: provision: %v", err)
		}
		return e
	}
	e.CatalogDSN = pgtest.CloneDatabase(t, 0, ts.catalog)
	for i, name := range spec.Servers {
		e.DSN[name] = pgtest.CloneDatabase(t, clusters[i], ts.servers[i])
	}
	e.register(t, spec)
	e.open(t)
	// The copied catalog names the template databases; it is pointed at
	// the test's copies as an operator moves a server's DSN (which takes
	// a map version for each server: tests compare versions, they do not
	// count them from 1).
	err := e.Catalog.Update(context.Background(), func(ctx context.Context, tx *catalog.Tx) error {
		for _, s := range e.Servers {
			admin := s.AdminDSN
			if admin == "" {
				admin = s.DSN
			}
			if err := tx.SetServerDSN(ctx, s.Name, s.DSN, admin); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("shardtest: point the catalog at the copies: %v", err)
	}
	return e
}

// register fills e.Servers from e.DSN and spec.AppDSN.
func (e *Env) register(t testing.TB, spec Spec) {
	t.Helper()
	for _, name := range spec.Servers {
		s := migrations.ServerSpec{Name: name, DSN: e.DSN[name]}
		if spec.AppRole {
			s.DSN, s.AdminDSN = AppDSN(t, e.DSN[name]), e.DSN[name]
		} else if spec.AppDSN != nil {
			if app := spec.AppDSN(name, s.DSN); app != "" {
				s.DSN, s.AdminDSN = app, e.DSN[name]
			}
		}
		e.Servers = append(e.Servers, s)
	}
}

func (e *Env) open(t testing.TB) {
	t.Helper()
	cat, err := catalog.Open(context.Background(), e.CatalogDSN)
	if err != nil {
		t.Fatalf("shardtest: %v", err)
	}
	t.Cleanup(cat.Close)
	e.Catalog = cat
}

// Router is a router on the environment's catalog.
func (e *Env) Router(t testing.TB) *router.Router {
	t.Helper()
	r, err := router.New(context.Background(), e.Catalog)
	if err != nil {
		t.Fatalf("shardtest: router: %v", err)
	}
	return r
}

// Generator is an ID generator on a slot leased from the environment's
// catalog, as an application starts one (catalog.StartGenerator); it is
// stopped, and its slot released, when the test ends.
func (e *Env) Generator(t testing.TB) *idgen.Generator {
	t.Helper()
	return Generator(t, e.Catalog)
}

// Generator is Env.Generator on any catalog.
func Generator(t testing.TB, cat *catalog.Catalog) *idgen.Generator {
	t.Helper()
	gen, stop, err := catalog.StartGenerator(context.Background(), cat, catalog.LeaserConfig{}, idgen.Config{})
	if err != nil {
		t.Fatalf("shardtest: generator: %v", err)
	}
	t.Cleanup(stop)
	return gen
}

// ServerOf names the server the router's current map places a shard on.
func ServerOf(t testing.TB, r *router.Router, shard int) string {
	t.Helper()
	pl, err := r.Snapshot().Placement(shard)
	if err != nil {
		t.Fatalf("shardtest: %v", err)
	}
	return pl.Server
}

// UserOn returns the n-th user key (from 1) whose shard, the key mod
// shards, the router's current map places on server.
func UserOn(t testing.TB, r *router.Router, shards int, server string, n int) int64 {
	t.Helper()
	for u := int64(1); u < 10000; u++ {
		if ServerOf(t, r, int(u%int64(shards))) == server {
			if n--; n == 0 {
				return u
			}
		}
	}
	t.Fatalf("shardtest: no user on server %s", server)
	return 0
}

// PlaceShard changes one shard's row of the map in the catalog, as an
// operator's move or fence would.
func PlaceShard(t testing.TB, cat *catalog.Catalog, shard int, server string, state router.ShardState) {
	t.Helper()
	if _, err := cat.PlaceShard(context.Background(), shard, server, state); err != nil {
		t.Fatalf("shardtest: place shard %d: %v", shard, err)
	}
}

// provision provisions the shards onto the used servers, then registers
// the others.
func provision(ctx context.Context, cat *catalog.Catalog, spec Spec, servers []migrations.ServerSpec) error {
	opts := migrations.ProvisionOptions{Servers: servers[:spec.Used], Shards: spec.Shards, ShardSQL: spec.ShardSQL}
	if err := migrations.Provision(ctx, cat, opts); err != nil {
		return err
	}
	if spec.Used < len(servers) {
		opts.Servers = servers
		return migrations.Provision(ctx, cat, opts)
	}
	return nil
}

// templateSet is a provisioned catalog and its servers' databases, sealed
// to be copied.
type templateSet struct {
	uses    int
	catalog string   // database name on cluster 0
	servers []string // database names, by server index
	err     error
}

var (
	mu        sync.Mutex
	templates = map[string]*templateSet{}
)

// templatesFor returns the templates of spec, provisioning them on its
// second use, or nil on the first: a shape that one test alone uses (2000
// shards, say) is cheaper provisioned in place than provisioned and then
// copied. Names and clusters matter to the copies (the catalog records the
// names, the databases live on the clusters); the AppDSN does not: the
// catalog is pointed at each test's DSNs after the copy.
func templatesFor(t testing.TB, spec Spec, clusters []int) *templateSet {
	t.Helper()
	key := fmt.Sprintf("%q %v shards=%d used=%d sql=%T %v", spec.Servers, clusters, spec.Shards, spec.Used, spec.ShardSQL, spec.ShardSQL)
	mu.Lock()
	defer mu.Unlock()
	ts := templates[key]
	if ts == nil {
		templates[key] = &templateSet{uses: 1}
		return nil
	}
	if ts.uses++; ts.uses > 2 {
		if ts.err != nil {
			t.Fatalf("shardtest: the templates of this shape failed before: %v", ts.err)
		}
		return ts
	}
	ts.err = fmt.Errorf("an earlier test failed to provision them")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var catDSN string
	ts.catalog, catDSN = pgtest.NewTemplate(t, 0)
	var servers []migrations.ServerSpec
	for i, name := range spec.Servers {
		db, dsn := pgtest.NewTemplate(t, clusters[i])
		ts.servers = append(ts.servers, db)
		servers = append(servers, migrations.ServerSpec{Name: name, DSN: dsn})
	}
	cat, err := catalog.Open(ctx, catDSN)
	if err == nil {
		err = provision(ctx, cat, spec, servers)
		cat.Close()
	}
	if err != nil {
		ts.err = err
		t.Fatalf("shardtest: provision the templates: %v", err)
	}
	pgtest.Seal(t, 0, ts.catalog)
	for i, db := range ts.servers {
		pgtest.Seal(t, clusters[i], db)
	}
	ts.err = nil
	return ts
}
