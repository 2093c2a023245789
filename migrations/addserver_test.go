package migrations

import (
	"context"
	"testing"

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
