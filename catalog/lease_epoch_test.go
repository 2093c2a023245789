package catalog

import (
	"errors"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestLeaseEpochUpgrade: a catalog at version 13, which does not record
// its history, still grants leases (to processes upgraded before it), and
// once migrated records it: the next grant by the same leaser checks it,
// and a changed history holds grants back.
func TestLeaseEpochUpgrade(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.migrateTo(ctx, 13); err != nil {
		t.Fatal(err)
	}
	l := layoutWithSlots(2)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits) VALUES (2, $1, $2, $3, $4, $5)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	s, err := NewLeaser(ctx, cat, LeaserConfig{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Acquire(ctx)
	if err != nil {
		t.Fatalf("leasing on a version-13 catalog: %v", err)
	}
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var recorded, now string
	if err := cat.pool.QueryRow(ctx, `SELECT epoch, (`+sqlCatalogEpoch+`) FROM shardkit.lease_epoch`).Scan(&recorded, &now); err != nil {
		t.Fatal(err)
	}
	if recorded != now {
		t.Fatalf("recorded epoch %q, the catalog's %q: want the same", recorded, now)
	}
	if err := s.Renew(ctx, before); err != nil {
		t.Fatalf("renewing across the migration: %v", err)
	}
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatalf("leasing on the migrated catalog: %v", err)
	}
	// As a restore of the catalog into another cluster would show it.
	pgtest.Exec(t, dsn, `UPDATE shardkit.lease_epoch SET epoch = 'another history'`)
	var hb *HeldBackError
	if _, err := s.Acquire(ctx); !errors.As(err, &hb) {
		t.Fatalf("leasing after the history changed: %v, want a *HeldBackError", err)
	}
	if err := s.Renew(ctx, before); err != nil {
		t.Fatalf("a lease the catalog still records is renewed during the hold: %v", err)
	}
}
