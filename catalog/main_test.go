package catalog

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestMain(m *testing.M) {
	// The cross-process lease tests re-run this binary as a child that
	// generates IDs; it needs no clusters of its own.
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	pgtest.Main(m, 1)
}

// testServers are the servers a seeded catalog places its shards on.
var testServers = []string{"alpha", "beta"}

// seedCatalog creates a catalog in a fresh database: the configuration
// (shards, layout), two servers, and every shard placed alternately on
// them at map version 1. It returns the catalog and its DSN.
func seedCatalog(t testing.TB, shards int, layout idgen.Layout) (*Catalog, string) {
	t.Helper()
	cat, dsn := openEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits) VALUES ($1, $2, $3, $4, $5, $6)`,
		shards, layout.EpochMs, int16(layout.TimeBits), int16(layout.ShardBits), int16(layout.SeqBits), int16(layout.SlotBits))
	for _, s := range testServers {
		pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn) VALUES ($1, $2)`, s, "postgres://"+s+"/db")
	}
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version)
		SELECT g, CASE WHEN g % 2 = 0 THEN $2 ELSE $3 END, 1 FROM generate_series(0, $1::integer - 1) g`,
		shards, testServers[0], testServers[1])
	return cat, dsn
}

// openEmpty opens a catalog on a fresh, empty database (closed at the
// test's end) and returns it with the database's DSN.
func openEmpty(t testing.TB) (*Catalog, string) {
	t.Helper()
	dsn := pgtest.NewDatabase(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	return cat, dsn
}

// layoutWithSlots is the default layout with slotBits slot bits.
func layoutWithSlots(slotBits uint8) idgen.Layout {
	l := idgen.DefaultLayout()
	l.SlotBits = slotBits
	return l
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
