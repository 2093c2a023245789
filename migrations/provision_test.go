package migrations

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// testEnv is a catalog database and one fresh database on each of n clusters.
type testEnv struct {
	catalogDSN string
	cat        *catalog.Catalog
	servers    []ServerSpec
}

func newEnv(t *testing.T, n int) *testEnv {
	t.Helper()
	ctx := context.Background()
	e := &testEnv{catalogDSN: pgtest.NewDatabase(t, 0)}
	cat, err := catalog.Open(ctx, e.catalogDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	e.cat = cat
	for i := range n {
		e.servers = append(e.servers, ServerSpec{Name: fmt.Sprintf("pg%d", i), DSN: pgtest.NewDatabase(t, i%4)})
	}
	return e
}

func TestProvision2000ShardsOn4Servers(t *testing.T) {
	if testing.Short() {
		t.Skip("provisions 2000 shards")
	}
	ctx := context.Background()
	e := newEnv(t, 4)
	start := time.Now()
	calls := 0
	opts := ProvisionOptions{Servers: e.servers, ShardSQL: testSQL, Progress: func(Progress) { calls++ }}
	if err := Provision(ctx, e.cat, opts); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	t.Logf("provisioned 2000 shards x 3 tables on 4 servers in %v (%d progress calls)", first, calls)
	// What keeps provisioning fast is batching: 25 schemas per transaction,
	// so 80 batches (one progress call each) for 2000 schemas. The batch
	// count is checked, not the wall time, which a loaded machine stretches
	// (make figures takes the times, through benchout, on a quiet machine).
	if want := 2000 / 25; calls != want {
		t.Errorf("%d batches of work, want %d (25 schemas per transaction)", calls, want)
	}
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range e.servers {
		got := snap.ShardsOn(s.Name)
		if len(got) != 500 || got[0] != i*500 {
			t.Fatalf("server %s has %d shards starting at %v, want 500 from %d", s.Name, len(got), got[:1], i*500)
		}
		conn := pgtest.Connect(t, s.DSN)
		var tables int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname LIKE 'shard\_%'`).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 1500 {
			t.Fatalf("server %s has %d shard tables, want 1500", s.Name, tables)
		}
	}
	// Again: a no-op.
	start = time.Now()
	calls = 0
	if err := Provision(ctx, e.cat, opts); err != nil {
		t.Fatal(err)
	}
	again := time.Since(start)
	t.Logf("second run: %v, %d progress calls", again, calls)
	if calls != 0 {
		t.Fatalf("second run did %d batches of work, want none", calls)
	}
	if err := benchout.Write("Provision",
		benchout.Metric{Value: first.Seconds(), Unit: "first-s"},
		benchout.Metric{Value: float64(again.Microseconds()) / 1e3, Unit: "again-ms"}); err != nil {
		t.Fatal(err)
	}
}

// The catalog may share its database with a shard server (a small setup):
// both use schema shardkit, with distinct tables.
func TestProvisionCatalogOnAShardServer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1)
	servers := []ServerSpec{{Name: "main", DSN: e.catalogDSN}, e.servers[0]}
	for range 2 {
		if err := Provision(ctx, e.cat, ProvisionOptions{Servers: servers, Shards: 6, ShardSQL: testSQL}); err != nil {
			t.Fatal(err)
		}
	}
	var id int64
	if err := pgtest.Connect(t, e.catalogDSN).QueryRow(ctx, `INSERT INTO shard_0002.follows (user_id, followee_id) VALUES (2, 3) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := snap.Layout.ShardOf(id); s != 2 || len(snap.ShardsOn("main")) != 3 {
		t.Fatalf("id %d has shard %d; main has shards %v", id, s, snap.ShardsOn("main"))
	}
}
