package catalog

import (
	"context"
	"errors"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestRecordPrimary records server a's primary and checks what the record
// accepts next: the same (no change), the same system on a newer timeline
// (a promotion), and never an older timeline or another system; routers
// load the record with the map, and a catalog before version 10 loads
// with nothing recorded.
func TestRecordPrimary(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.migrateTo(ctx, 9); err != nil {
		t.Fatal(err)
	}
	l := idgen.DefaultLayout()
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, map_version) VALUES (2, $1, $2, $3, $4, $5, 3)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn, replicas) VALUES ('a', 'postgres://a/db', '{}')`)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version) SELECT g, 'a', 3 FROM generate_series(0, 1) g`)
	primaryOf := func() router.Primary {
		t.Helper()
		snap, err := cat.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := snap.Server("a")
		// The batched reload reads the record too.
		older, err := router.NewSnapshot(snap.Version-1, snap.Shards, snap.Servers(), snap.Placements())
		if err != nil {
			t.Fatal(err)
		}
		next, err := cat.LoadChanges(ctx, older)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := next.Server("a"); b.Primary != a.Primary {
			t.Fatalf("LoadChanges reads primary %v, Load %v", b.Primary, a.Primary)
		}
		return a.Primary
	}
	if p := primaryOf(); p.Recorded() {
		t.Fatalf("a version 9 catalog records primary %v", p)
	}
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	record := func(p router.Primary) (bool, error) {
		var changed bool
		err := cat.Update(ctx, func(ctx context.Context, tx *Tx) (err error) {
			changed, err = tx.RecordPrimary(ctx, "a", p)
			return err
		})
		return changed, err
	}
	tl1 := router.Primary{SystemID: "7420000000000000001", Timeline: 1}
	tl2 := router.Primary{SystemID: tl1.SystemID, Timeline: 2}
	for _, c := range []struct {
		name    string
		p       router.Primary
		changed bool
		refused bool
		want    router.Primary
	}{
		{"first record", tl1, true, false, tl1},
		{"the same again", tl1, false, false, tl1},
		{"promoted", tl2, true, false, tl2},
		{"old primary", tl1, false, true, tl2},
		{"another system", router.Primary{SystemID: "7420000000000000002", Timeline: 3}, false, true, tl2},
		{"a standby", router.Primary{SystemID: tl1.SystemID}, false, true, tl2},
	} {
		changed, err := record(c.p)
		var npe *router.NotPrimaryError
		switch {
		case c.refused && !errors.Is(err, ErrPrimaryRefused):
			t.Errorf("%s: %v, want ErrPrimaryRefused", c.name, err)
		case c.refused && c.p.Timeline > 0 && !errors.As(err, &npe):
			t.Errorf("%s: %v, want a *router.NotPrimaryError", c.name, err)
		case !c.refused && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case changed != c.changed:
			t.Errorf("%s: changed %v, want %v", c.name, changed, c.changed)
		}
		if got := primaryOf(); got != c.want {
			t.Errorf("%s: the map records %v, want %v", c.name, got, c.want)
		}
	}
	unknown := cat.Update(ctx, func(ctx context.Context, tx *Tx) error {
		_, err := tx.RecordPrimary(ctx, "nope", tl2)
		return err
	})
	if !errors.Is(unknown, router.ErrUnknownServer) {
		t.Fatalf("record for an unknown server: %v, want router.ErrUnknownServer", unknown)
	}
}
