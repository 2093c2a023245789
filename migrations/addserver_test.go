package migrations

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// A server added to a catalog in use bumps the map version, so routers
// reload and know the server before any shard moves onto it.
func TestAddServerBumpsMapVersion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3)
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers[:2], Shards: 8}); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	before := rt.Snapshot()
	if _, ok := before.Server("pg2"); ok {
		t.Fatal("pg2 known before it was added")
	}
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers}); err != nil {
		t.Fatal(err)
	}
	after, err := rt.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version <= before.Version {
		t.Fatalf("map version %d after adding a server, was %d", after.Version, before.Version)
	}
	if _, ok := after.Server("pg2"); !ok || len(after.ShardsOn("pg2")) != 0 {
		t.Fatalf("pg2 after adding: known=%v shards=%v, want known with no shards", ok, after.ShardsOn("pg2"))
	}
	// Provisioning again with the same servers changes nothing.
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers}); err != nil {
		t.Fatal(err)
	}
	again, _ := rt.Reload(ctx)
	if again.Version != after.Version {
		t.Fatalf("map version moved from %d to %d on a no-op provision", after.Version, again.Version)
	}
}

// Administration goes through the admin DSN alone: with every app DSN
// pointing at a port nothing listens on, provisioning, migrating and
// status all work, and a server's DSNs, app or admin, cannot be another
// server's.
func TestAdminDSN(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2)
	servers := make([]ServerSpec, len(e.servers))
	for i, s := range e.servers {
		servers[i] = ServerSpec{Name: s.Name, DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:1/app%d?sslmode=disable&connect_timeout=1", i), AdminDSN: s.DSN}
	}
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, e.cat, testSQLv2, MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := Status(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Servers {
		if s.Error != "" || s.Shards != 4 || s.Bytes == 0 || s.AdminDSN == "" {
			t.Fatalf("status of %s: %+v", s.Name, s)
		}
	}
	snap, err := e.cat.Operator().Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := snap.Server("pg1"); s.DSN != servers[1].DSN || s.Admin() != servers[1].AdminDSN {
		t.Fatalf("pg1 registered as %+v", s)
	}
	// Running it again with the app DSNs alone is no conflict.
	again := []ServerSpec{{Name: "pg0", DSN: servers[0].DSN}}
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: append(again, servers[1])}); err != nil {
		t.Fatalf("provision again without pg0's admin DSN: %v", err)
	}
	dups := []struct {
		name string
		spec ServerSpec
	}{
		{"app DSN is another's admin DSN", ServerSpec{Name: "pg9", DSN: servers[0].AdminDSN, AdminDSN: servers[1].AdminDSN + "&x=1"}},
		{"admin DSN is another's app DSN", ServerSpec{Name: "pg9", DSN: "postgres://elsewhere/db", AdminDSN: servers[1].DSN}},
		{"another admin DSN for a registered name", ServerSpec{Name: "pg0", DSN: servers[0].DSN, AdminDSN: servers[1].AdminDSN}},
	}
	for _, d := range dups {
		if err := registerOnly(ctx, e, d.spec); !errors.Is(err, ErrDuplicateServer) {
			t.Fatalf("%s: %v, want ErrDuplicateServer", d.name, err)
		}
	}
}

// registerOnly runs the catalog part of provisioning for one server.
func registerOnly(ctx context.Context, e *testEnv, s ServerSpec) error {
	return e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return registerServers(ctx, tx, []ServerSpec{s})
	})
}
