package migrations

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
)

// shard5 is a fresh database on the cluster holding logical shard 5 of
// layout: the shard the ID collision tests write into.
func shard5(t *testing.T, cluster int, layout idgen.Layout) (dsn string) {
	t.Helper()
	dsn = pgtest.NewDatabase(t, cluster)
	if err := shardschema.ApplyShard(context.Background(), pgtest.Connect(t, dsn), layout, 5, testSQL, shardschema.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// insertAppIDs writes one photo of shard 5 per ID, as the application does
// with IDs it made itself: a duplicate fails with a unique violation.
func insertAppIDs(ctx context.Context, conn *pgx.Conn, ids []int64) error {
	_, err := conn.Exec(ctx, `INSERT INTO shard_0005.photos (id, user_id, caption) SELECT unnest($1::bigint[]), 2005, 'app'`, ids)
	return err
}

// Raw SQL inserts (next_id(), slot 0) and application IDs (slots 1 and 63)
// written into one shard at the same time never collide: the primary key
// would refuse a duplicate, failing the writer.
func TestRawAndAppIDsNeverCollide(t *testing.T) {
	ctx := context.Background()
	layout := idgen.DefaultLayout()
	dsn := shard5(t, 2, layout)
	gen, stop, err := idgen.Start(ctx, layout, idgen.StaticLeaser{Slot: 1}, idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const rounds = 40
	g, gctx := errgroup.WithContext(ctx)
	for w := range 2 { // two raw SQL writers: bursts, and single rows
		conn := pgtest.Connect(t, dsn)
		g.Go(func() error {
			for range rounds {
				sql := `INSERT INTO shard_0005.photos (user_id, caption) SELECT 5 + 2000 * g, 'raw' FROM generate_series(1, 200) g`
				if w == 1 {
					sql = `INSERT INTO shard_0005.photos (user_id, caption) VALUES (2005, 'raw')`
				}
				if _, err := conn.Exec(gctx, sql); err != nil {
					return err
				}
			}
			return nil
		})
	}
	insertIDs := func(conn *pgx.Conn, ids []int64) error { return insertAppIDs(gctx, conn, ids) }
	appConn := pgtest.Connect(t, dsn)
	g.Go(func() error { // the plugin's generator, slot 1
		for range rounds {
			ids, err := gen.NextN(gctx, 5, 200)
			if err != nil {
				return err
			}
			if err := insertIDs(appConn, ids); err != nil {
				return err
			}
		}
		return nil
	})
	composeConn := pgtest.Connect(t, dsn)
	g.Go(func() error { // IDs composed by hand in slot 63, all counters of the current ms
		var last int64
		for range rounds {
			ms := time.Now().UnixMilli()
			for ms <= last { // one burst per ms, or this writer collides with itself
				time.Sleep(100 * time.Microsecond)
				ms = time.Now().UnixMilli()
			}
			last = ms
			ids := make([]int64, 0, 16)
			for c := range 1 << layout.CounterBits() {
				id, err := layout.Compose(ms, 5, layout.SeqOf(c, layout.Slots()-1))
				if err != nil {
					return err
				}
				ids = append(ids, id)
			}
			if err := insertIDs(composeConn, ids); err != nil {
				return err
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		t.Fatalf("a writer failed (a collision is a unique violation): %v", err)
	}
	rows, err := appConn.Query(ctx, `SELECT id, caption FROM shard_0005.photos`)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var caption string
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &caption}, func() error {
		n++
		p, err := layout.Decode(id)
		if err != nil {
			return err
		}
		if p.Shard != 5 {
			t.Fatalf("id %d has shard %d, want 5", id, p.Shard)
		}
		if (caption == "raw") != (p.Slot == 0) {
			t.Fatalf("id %d (%s) has slot %d", id, caption, p.Slot)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := rounds*200 + rounds + rounds*200 + rounds*16; n != want {
		t.Fatalf("%d rows, want %d", n, want)
	}
}

// A cancelled next_id() call leaves no advisory lock behind, so the next
// insert into the shard does not hang.
func TestNextIDCancelReleasesLock(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t, 3)
	conn := pgtest.Connect(t, dsn)
	if err := shardschema.ApplyShard(ctx, conn, idgen.DefaultLayout(), 9, testSQL, shardschema.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// Cancels land at random points of the statement; most calls of
	// next_id() are inside the locked region, so some cancels do too.
	for i := range 15 {
		timeout := fmt.Sprintf("%dms", 30+i*20)
		if _, err := conn.Exec(ctx, "SET statement_timeout = '"+timeout+"'"); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctx, `INSERT INTO shard_0009.photos (user_id) SELECT g FROM generate_series(1, 200000) g`)
		if err == nil {
			t.Fatal("a 200,000-row insert finished within the statement timeout")
		}
		if _, err := conn.Exec(ctx, "RESET statement_timeout"); err != nil {
			t.Fatal(err)
		}
		var locks int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
			t.Fatal(err)
		}
		if locks != 0 {
			t.Fatalf("timeout %s: %d advisory locks held after the cancel", timeout, locks)
		}
	}
	// Another session can still take IDs at once.
	other := pgtest.Connect(t, dsn)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := other.Exec(tctx, `INSERT INTO shard_0009.photos (user_id) VALUES (9)`); err != nil {
		t.Fatalf("insert after the cancels: %v", err)
	}
}
