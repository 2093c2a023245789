package rebalance

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
)

// TestMoveRefusedDuringMigration: while a migration runs (it holds the
// catalog's provisioning lock for its whole run), a move's preflight fails
// with errMigrationRunning and nothing is journalled; once the migration
// has finished, the same move succeeds and its target has the new version.
// A migration started while the move is unfinished is refused naming it.
func TestMoveRefusedDuringMigration(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 1, 4) // shards 0-3 on s0
	seedPhotos(t, e, 1, 50)
	mv := e.mover(t, Config{})
	width := fstest.MapFS{
		"0002_photos_width.sql": {Data: []byte("ALTER TABLE photos ADD COLUMN width int NOT NULL DEFAULT 0;")},
		"0003_photos_width_index.sql": {Data: []byte(migrations.NoTransactionMarker +
			"\nCREATE INDEX CONCURRENTLY photos_width ON photos (width);")},
	}
	v2 := photos.With(width)
	var during error
	if err := migrations.Migrate(ctx, e.cat, v2, migrations.MigrateOptions{Progress: func(p migrations.Progress) {
		if p.Done == 1 {
			_, during = mv.Move(ctx, 1, "s1", MoveOptions{})
		}
	}}); err != nil {
		t.Fatal(err)
	}
	var pe *MoveError
	if !errors.As(during, &pe) || pe.Kind != ErrPreflight || !errors.Is(during, errMigrationRunning) || !errors.Is(during, catalog.ErrProvisionRunning) {
		t.Fatalf("a move during the migration: err = %v; want a *MoveError of Kind ErrPreflight with errMigrationRunning", during)
	}
	if ms, err := RecentMoves(ctx, e.cat, 10); err != nil || len(ms) != 0 {
		t.Fatalf("the refused move left %d journal rows (%v)", len(ms), err)
	}
	// A new mover: a Mover reads the catalog's per-shard SQL once, so one
	// made before the migration would create the target without version 2
	// (its preflight refuses that, errShardSQLMismatch).
	m, err := e.mover(t, Config{}).Move(ctx, 1, "s1", MoveOptions{})
	if err != nil {
		t.Fatalf("the move after the migration: %v", err)
	}
	var n int
	if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'shard_0001' AND table_name = 'photos' AND column_name = 'width'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the target's photos has %d width columns (%v), want 1", n, err)
	}
	// The index built outside a transaction is built on the target too.
	var valid bool
	if err := e.pools["s1"].QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'shard_0001' AND c.relname = 'photos_width'`).Scan(&valid); err != nil || !valid {
		t.Fatalf("the target's photos_width: valid %v, %v; want a valid index", valid, err)
	}
	v3 := photos.With(width, fstest.MapFS{"0004_photos_height.sql": {Data: []byte("ALTER TABLE photos ADD COLUMN height int;")}})
	err = migrations.Migrate(ctx, e.cat, v3, migrations.MigrateOptions{})
	var me *migrations.MovesError
	if !errors.As(err, &me) || len(me.Moves) != 1 || me.Moves[0].ID != m.ID || me.Moves[0].State != "reversible" {
		t.Fatalf("a migration during the reversible move %d: err = %v; want a *MovesError naming it", m.ID, err)
	}
	if _, err := e.mover(t, Config{}).Rollback(ctx, 1); err != nil {
		t.Fatalf("rollback after the refused migration: %v", err)
	}
}
