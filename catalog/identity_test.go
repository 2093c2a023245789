package catalog

import (
	"errors"
	"regexp"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestStamp: a catalog made before version 13 has no identity
// (ErrNoIdentity); migrating it gives it one, which stays, and which
// another catalog does not share; the stamp carries the map version and
// the servers without their admin DSNs.
func TestStamp(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.migrateTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	l := idgen.DefaultLayout()
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, map_version) VALUES (2, $1, $2, $3, $4, $5, 5)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn, admin_dsn) VALUES ('a', 'postgres://a/db', 'postgres://a-admin/db')`)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version) VALUES (0, 'a', 5), (1, 'a', 5)`)
	if _, err := cat.Stamp(ctx); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("stamp of a version 12 catalog: %v, want ErrNoIdentity", err)
	}
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := cat.Stamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(st.ID) {
		t.Fatalf("catalog id %q", st.ID)
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 5 || st.Epoch != snap.CatalogEpoch || len(st.Servers) != 1 ||
		st.Servers[0].DSN != "postgres://a/db" || st.Servers[0].AdminDSN != "" || !st.Servers[0].AdminHidden {
		t.Fatalf("stamp %+v; map v%d epoch %s", st, snap.Version, snap.CatalogEpoch)
	}
	again, err := cat.Stamp(ctx)
	if err != nil || again.ID != st.ID {
		t.Fatalf("second stamp: id %q (%v), first %q", again.ID, err, st.ID)
	}
	other, _ := seedCatalog(t, 2, l)
	ost, err := other.Stamp(ctx)
	if err != nil || ost.ID == st.ID {
		t.Fatalf("another catalog's id %q (%v), this one's %q", ost.ID, err, st.ID)
	}
}
