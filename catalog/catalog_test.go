package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

func TestMigrateTwiceIsNoOp(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if _, err := cat.Load(ctx); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("Load before Migrate = %v, want ErrNoCatalog", err)
	}
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var n1 int
	var at1 time.Time
	if err := cat.pool.QueryRow(ctx, `SELECT count(*), max(applied_at) FROM shardkit.catalog_version`).Scan(&n1, &at1); err != nil {
		t.Fatal(err)
	}
	if n1 != Version() || Version() < 2 {
		t.Fatalf("%d versions applied, Version() = %d", n1, Version())
	}
	if err := cat.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	var n2 int
	var at2 time.Time
	if err := cat.pool.QueryRow(ctx, `SELECT count(*), max(applied_at) FROM shardkit.catalog_version`).Scan(&n2, &at2); err != nil {
		t.Fatal(err)
	}
	if n2 != n1 || !at2.Equal(at1) {
		t.Fatalf("second Migrate changed catalog_version: %d→%d rows, %v→%v", n1, n2, at1, at2)
	}
	// Migrated but not configured: still no catalog.
	if _, err := cat.Load(ctx); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("Load without a config row = %v, want ErrNoCatalog", err)
	}
	if _, err := cat.Config(ctx); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("Config without a config row = %v, want ErrNoCatalog", err)
	}
	// Instagram's layout (41+13+10 = 64 bits) is accepted by the table;
	// a layout of 63 bits is not.
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits) VALUES (2000, 1314220021721, 41, 13, 10, 6)`)
	if _, err := cat.pool.Exec(ctx, `UPDATE shardkit.config SET time_bits = 40`); err == nil {
		t.Fatal("a 63-bit layout was accepted by the catalog")
	}
}

func TestLoad(t *testing.T) {
	cat, _ := seedCatalog(t, 16, idgen.DefaultLayout())
	snap, err := cat.Load(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 1 || snap.Shards != 16 || snap.Layout != idgen.DefaultLayout() {
		t.Fatalf("snapshot version %d shards %d layout %+v", snap.Version, snap.Shards, snap.Layout)
	}
	for shard := range 16 {
		p, err := snap.Placement(shard)
		if err != nil || p.Server != testServers[shard%2] || p.Schema != router.SchemaName(shard) || p.State != router.StateActive {
			t.Fatalf("Placement(%d) = %+v, %v", shard, p, err)
		}
	}
	srv, ok := snap.Server("beta")
	if !ok || srv.DSN != "postgres://beta/db" || srv.State != "active" || len(srv.Replicas) != 0 {
		t.Fatalf("Server(beta) = %+v, %v", srv, ok)
	}
	cfg, err := cat.Config(testCtx(t))
	if err != nil || cfg.Shards != 16 || cfg.Layout != idgen.DefaultLayout() {
		t.Fatalf("Config = %+v, %v", cfg, err)
	}
}

// dropChecks removes the config table's CHECK constraints, as a hand-edited
// or corrupted catalog might have.
const dropChecks = `DO $$ DECLARE c text; BEGIN
	FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'shardkit.config'::regclass AND contype = 'c' LOOP
		EXECUTE format('ALTER TABLE shardkit.config DROP CONSTRAINT %I', c);
	END LOOP; END $$; `

// TestLoadMalformed corrupts rows the table constraints cannot catch and
// checks that Load refuses the catalog, naming the problem.
func TestLoadMalformed(t *testing.T) {
	tests := []struct {
		name string
		sql  string
	}{
		{"shard without a row", `DELETE FROM shardkit.shard_map WHERE shard = 5`},
		{"shard beyond the count", `INSERT INTO shardkit.shard_map (shard, server, version) VALUES (8, 'alpha', 1)`},
		{"epoch in the future", `UPDATE shardkit.config SET epoch_ms = (extract(epoch FROM now()) * 1000)::bigint + 86400000`},
		{"fewer shards than placed", `UPDATE shardkit.config SET shards = 4`},
		{"slot bits leave no counter", dropChecks + `UPDATE shardkit.config SET slot_bits = 10`},
		{"63-bit layout", dropChecks + `UPDATE shardkit.config SET time_bits = 40`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat, dsn := seedCatalog(t, 8, idgen.DefaultLayout())
			pgtest.Exec(t, dsn, tt.sql)
			_, err := cat.Load(testCtx(t))
			if !errors.Is(err, router.ErrBadCatalog) {
				t.Fatalf("Load after %q = %v, want router.ErrBadCatalog", tt.sql, err)
			}
			t.Log(err)
		})
	}
}

// TestWatchReloadsOnNotify moves a shard with Catalog.PlaceShard and checks
// that a watching Router installs the new map from the NOTIFY.
func TestWatchReloadsOnNotify(t *testing.T) {
	cat, _ := seedCatalog(t, 8, idgen.DefaultLayout())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	if r.Snapshot().Version != 1 {
		t.Fatalf("initial version %d", r.Snapshot().Version)
	}
	updates, unsubscribe := r.Subscribe()
	defer unsubscribe()
	wctx, stopWatch := context.WithCancel(ctx)
	watchErr := make(chan error, 1)
	go func() { watchErr <- r.Watch(wctx) }()
	// Wait for the listener before the change, so the NOTIFY (not the
	// listener's initial reload) is what brings the new map.
	for {
		var listening bool
		if err := cat.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN "' || $1 || '"')`, router.MapChannel).Scan(&listening); err != nil {
			t.Fatal(err)
		}
		if listening {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the router never started listening")
		case <-time.After(20 * time.Millisecond):
		}
	}

	v, err := cat.PlaceShard(ctx, 2, "beta", router.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	if v != 2 {
		t.Fatalf("PlaceShard returned version %d, want 2", v)
	}
	select {
	case s := <-updates:
		if s.Version != 2 {
			t.Fatalf("notified snapshot version %d", s.Version)
		}
		if p, _ := s.Placement(2); p.Server != "beta" {
			t.Fatalf("shard 2 on %q after the move", p.Server)
		}
	case <-ctx.Done():
		t.Fatal("no reload after NOTIFY")
	}
	if r.Snapshot().Version != 2 {
		t.Fatalf("router holds version %d", r.Snapshot().Version)
	}
	// A failing change rolls back: no new version, no notification.
	if _, err = cat.PlaceShard(ctx, 99, "beta", router.StateActive); !errors.Is(err, router.ErrUnknownShard) {
		t.Fatalf("PlaceShard of a shard the map lacks = %v, want ErrUnknownShard", err)
	}
	if s, err := cat.Load(ctx); err != nil || s.Version != 2 {
		t.Fatalf("after a failed change: version %v, %v", s, err)
	}
	stopWatch()
	if err := <-watchErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v", err)
	}
}

// TestMigrateRefusesNewerCatalog: a catalog migrated by a newer shardkit
// (a version this one does not know) is left as it is, with
// ErrCatalogTooNew, rather than taken as up to date.
func TestMigrateRefusesNewerCatalog(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.catalog_version (version, name) VALUES ($1, 'from a newer shardkit')`, Version()+1)
	err := cat.Migrate(ctx)
	if !errors.Is(err, ErrCatalogTooNew) {
		t.Fatalf("Migrate of a catalog at version %d = %v, want ErrCatalogTooNew", Version()+1, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("version %d", Version()+1)) {
		t.Errorf("the error does not name the catalog's version: %v", err)
	}
}
