package catalog

import (
	"errors"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestCatalogComesBackOlder: a catalog whose map version goes back below a
// router's is refused with ErrCatalogRegressed, and one of another history
// (a failover or a restore: another epoch) is read whole, so that a row it
// stamped with a version the router had already passed is not missed.
func TestCatalogComesBackOlder(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	l := idgen.DefaultLayout()
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, map_version) VALUES (2, $1, $2, $3, $4, $5, 5)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn, replicas) VALUES ('a', 'postgres://a/db', '{}'), ('b', 'postgres://b/db', '{}')`)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version) SELECT g, 'a', 5 FROM generate_series(0, 1) g`)
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.CatalogEpoch == "" {
		t.Fatal("Load read no catalog epoch")
	}

	// Version 4 after the router read 5: commits were lost.
	pgtest.Exec(t, dsn, `UPDATE shardkit.config SET map_version = 4`)
	var re *RegressedError
	if _, err := cat.LoadChanges(ctx, snap); !errors.Is(err, ErrCatalogRegressed) || !errors.As(err, &re) || re.Had != 5 || re.Now != 4 {
		t.Fatalf("LoadChanges from a catalog at version 4 after 5: %v, want a *RegressedError 5 → 4", err)
	}

	// The catalog's new history moves shard 0 at version 5 and goes on
	// to 6: the router, at 5, would read only rows after 5.
	pgtest.Exec(t, dsn, `UPDATE shardkit.shard_map SET server = 'b', version = 5 WHERE shard = 0`)
	pgtest.Exec(t, dsn, `UPDATE shardkit.config SET map_version = 6`)
	same, err := cat.LoadChanges(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := same.Placement(0); p.Server != "a" {
		t.Fatalf("same epoch: shard 0 on %s; the incremental read cannot see a row of an old version", p.Server)
	}
	other, err := router.NewSnapshot(snap.Version, snap.Shards, snap.Servers(), snap.Placements())
	if err != nil {
		t.Fatal(err)
	}
	other.CatalogEpoch = "another history"
	got, err := cat.LoadChanges(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := got.Placement(0); got.Version != 6 || p.Server != "b" || got.CatalogEpoch != snap.CatalogEpoch {
		t.Fatalf("another epoch: version %d, shard 0 on %s, epoch %q; want the whole map read: 6, b, %q", got.Version, p.Server, got.CatalogEpoch, snap.CatalogEpoch)
	}
	// Another history that is older than the router's map is refused.
	pgtest.Exec(t, dsn, `UPDATE shardkit.config SET map_version = 3`)
	if _, err := cat.LoadChanges(ctx, other); !errors.As(err, &re) || !re.Epoch {
		t.Fatalf("another epoch at version 3: %v, want a *RegressedError with Epoch", err)
	}
}
