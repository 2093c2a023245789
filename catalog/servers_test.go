package catalog

import (
	"context"
	"errors"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestMigrateKeepsServers migrates a catalog made by the shardkit before
// admin DSNs (catalog version 6), in use, and checks that its servers and
// map come through with one DSN each, for both purposes.
func TestMigrateKeepsServers(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.migrateTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	l := idgen.DefaultLayout()
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, map_version) VALUES (4, $1, $2, $3, $4, $5, 7)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn, replicas) VALUES ('a', 'postgres://a/db', '{postgres://a2/db}'), ('b', 'postgres://b/db', '{}')`)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version) SELECT g, CASE WHEN g < 2 THEN 'a' ELSE 'b' END, 7 FROM generate_series(0, 3) g`)
	// Application processes may be upgraded before the catalog is.
	if snap, err := cat.Load(ctx); err != nil {
		t.Fatalf("Load of the version 6 catalog: %v", err)
	} else if a, _ := snap.Server("a"); a.Admin() != "postgres://a/db" {
		t.Fatalf("server a of the version 6 catalog: %+v", a)
	}

	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 7 || len(snap.ShardsOn("a")) != 2 || len(snap.ShardsOn("b")) != 2 {
		t.Fatalf("after the migration: version %d, a %v, b %v", snap.Version, snap.ShardsOn("a"), snap.ShardsOn("b"))
	}
	a, ok := snap.Server("a")
	if !ok || a.DSN != "postgres://a/db" || a.AdminDSN != "" || a.Admin() != "postgres://a/db" ||
		len(a.Replicas) != 1 || a.Replicas[0] != "postgres://a2/db" || a.State != "active" {
		t.Fatalf("server a after the migration: %+v, %v", a, ok)
	}
	var applied int
	if err := cat.pool.QueryRow(ctx, `SELECT max(version) FROM shardkit.catalog_version`).Scan(&applied); err != nil || applied != Version() {
		t.Fatalf("catalog at version %d (%v), want %d", applied, err, Version())
	}
}

// TestSetServerDSN changes the DSNs of a server: each change makes a new
// map version with the new DSNs, an admin DSN equal to the app DSN is one
// DSN for both, and bad changes are refused with typed errors, changing
// nothing. Only the operator's view of the catalog carries the admin DSN:
// the application's snapshots, loaded whole or as changes, say only that
// there is one.
func TestSetServerDSN(t *testing.T) {
	cat, _ := seedCatalog(t, 4, idgen.DefaultLayout())
	ctx := testCtx(t)
	set := func(name, app, admin string) error {
		return cat.Update(ctx, func(ctx context.Context, tx *Tx) error { return tx.SetServerDSN(ctx, name, app, admin) })
	}
	type dsns struct{ app, admin, effective string }
	steps := []struct {
		name       string
		server     string
		app, admin string
		wantErr    error
		want       dsns // of server alpha, after the step
	}{
		{"admin only", "alpha", "", "postgres://alpha-direct/db", nil,
			dsns{"postgres://alpha/db", "postgres://alpha-direct/db", "postgres://alpha-direct/db"}},
		{"app only keeps the admin DSN", "alpha", "postgres://pooler:6432/db", "", nil,
			dsns{"postgres://pooler:6432/db", "postgres://alpha-direct/db", "postgres://alpha-direct/db"}},
		{"admin equal to app is one DSN", "alpha", "postgres://alpha/db?password=new", "postgres://alpha/db?password=new", nil,
			dsns{"postgres://alpha/db?password=new", "", "postgres://alpha/db?password=new"}},
		{"app only then changes both", "alpha", "postgres://alpha/db?password=newer", "", nil,
			dsns{"postgres://alpha/db?password=newer", "", "postgres://alpha/db?password=newer"}},
		{"unknown server", "gamma", "postgres://gamma/db", "", router.ErrUnknownServer,
			dsns{"postgres://alpha/db?password=newer", "", "postgres://alpha/db?password=newer"}},
		{"nothing to change", "alpha", "", "", ErrBadDSN,
			dsns{"postgres://alpha/db?password=newer", "", "postgres://alpha/db?password=newer"}},
		{"unparsable DSN", "alpha", "postgres://alpha:notaport/db", "", ErrBadDSN,
			dsns{"postgres://alpha/db?password=newer", "", "postgres://alpha/db?password=newer"}},
		{"another server's DSN", "alpha", "", "postgres://beta/db", ErrDSNInUse,
			dsns{"postgres://alpha/db?password=newer", "", "postgres://alpha/db?password=newer"}},
	}
	version := int64(1)
	appSnap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		err := set(st.server, st.app, st.admin)
		if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
			t.Fatalf("%s: SetServerDSN = %v, want %v", st.name, err, st.wantErr)
		}
		if err == nil {
			version++
		}
		snap, err := cat.Operator().Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, load := range []func() (*router.Snapshot, error){
			func() (*router.Snapshot, error) { return cat.Load(ctx) },
			func() (*router.Snapshot, error) { return cat.LoadChanges(ctx, appSnap) },
		} {
			app, err := load()
			if err != nil {
				t.Fatal(err)
			}
			appSnap = app
			a, _ := app.Server("alpha")
			if a.AdminDSN != "" || a.AdminHidden != (st.want.admin != "") || a.Direct() != (st.want.admin == "") {
				t.Fatalf("%s: the application's snapshot has alpha %+v", st.name, a)
			}
		}
		a, _ := snap.Server("alpha")
		if got := (dsns{a.DSN, a.AdminDSN, a.Admin()}); got != st.want || snap.Version != version {
			t.Fatalf("%s: alpha %+v at version %d, want %+v at version %d", st.name, got, snap.Version, st.want, version)
		}
		if b, _ := snap.Server("beta"); b.DSN != "postgres://beta/db" || b.AdminDSN != "" {
			t.Fatalf("%s: beta changed: %+v", st.name, b)
		}
	}
}

// TestOpenPreparesNothing: the catalog's connections keep no named
// prepared statement, which on a pooled server connection would meet
// another client's (PgBouncer in transaction mode answers 42P05), unless
// the DSN asks for a query mode itself.
func TestOpenPreparesNothing(t *testing.T) {
	_, dsn := seedCatalog(t, 8, idgen.DefaultLayout())
	for _, tt := range []struct {
		name     string
		dsn      string
		prepared bool
	}{
		{"default", dsn + "&pool_max_conns=1", false},
		{"the DSN's mode", dsn + "&pool_max_conns=1&default_query_exec_mode=cache_statement", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			cat, err := Open(ctx, tt.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			snap, err := cat.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cat.PlaceShard(ctx, 1, "alpha", router.StateActive); err != nil {
				t.Fatal(err)
			}
			if _, err := cat.MapVersion(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := cat.LoadChanges(ctx, snap); err != nil {
				t.Fatal(err)
			}
			var n int
			// One connection: the statements above ran on it.
			if err := cat.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if (n > 0) != tt.prepared {
				t.Fatalf("%d prepared statements on the catalog connection, want prepared %v", n, tt.prepared)
			}
		})
	}
}
