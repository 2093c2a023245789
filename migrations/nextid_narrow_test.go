package migrations

import (
	"context"
	"math"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// Raw SQL inserts (next_id(), slot 0) and IDs from 32 generators on
// 10-bit leases (every part of slots 1 and 63) written into one shard at
// the same time never collide: the primary key would refuse a duplicate.
func TestRawAndNarrowLeaseIDsNeverCollide(t *testing.T) {
	ctx := context.Background()
	layout := idgen.DefaultLayout()
	dsn := shard5(t, 1, layout)
	const rounds, batch = 20, 100
	g, gctx := errgroup.WithContext(ctx)
	raw := pgtest.Connect(t, dsn)
	g.Go(func() error {
		for range rounds {
			if _, err := raw.Exec(gctx, `INSERT INTO shard_0005.photos (user_id, caption) SELECT 5 + 2000 * g, 'raw' FROM generate_series(1, 200) g`); err != nil {
				return err
			}
		}
		return nil
	})
	var gens []*idgen.Generator
	for _, slot := range []int{1, 63} {
		for part := range 1 << (layout.SeqBits - layout.SlotBits) {
			l := idgen.NewLease(slot+part<<layout.SlotBits, 0, "test", 0, time.Now().Add(time.Hour), math.MaxInt64)
			l.Bits = layout.SeqBits
			gen, err := idgen.New(layout, l, idgen.Config{})
			if err != nil {
				t.Fatal(err)
			}
			gens = append(gens, gen)
		}
	}
	for w := range 2 {
		conn := pgtest.Connect(t, dsn)
		g.Go(func() error {
			for r := range rounds {
				for i := w; i < len(gens); i += 2 {
					ids, err := gens[i].NextN(gctx, 5, batch/(1+r%2))
					if err != nil {
						return err
					}
					if err := insertAppIDs(gctx, conn, ids); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("a writer failed (a collision is a unique violation): %v", err)
	}
	var n, rawN, slot0 int
	err := raw.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE caption = 'raw'), count(*) FILTER (WHERE id & 63 = 0) FROM shard_0005.photos`).Scan(&n, &rawN, &slot0)
	if err != nil {
		t.Fatal(err)
	}
	if rawN != rounds*200 || slot0 != rawN || n != rawN+len(gens)*rounds*(batch+batch/2)/2 {
		t.Fatalf("%d rows, %d raw, %d in slot 0", n, rawN, slot0)
	}
}
