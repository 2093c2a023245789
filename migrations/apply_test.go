package migrations

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
)

func TestApplyShardCreatesTablesAndNextID(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 0))
	layout := idgen.DefaultLayout()
	for range 2 { // the second run is a no-op
		if err := shardschema.ApplyShard(ctx, conn, layout, 5, testSQL, shardschema.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM shardkit.shard_migrations WHERE schema_name = 'shard_0005'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 { // template, 0001 tables, 0001 indexes
		t.Fatalf("records = %d, want 3", n)
	}
	before := time.Now().UnixMilli()
	var id int64
	if err := conn.QueryRow(ctx, `INSERT INTO shard_0005.photos (user_id, caption) VALUES (2005, 'raw') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	p, err := layout.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Shard != 5 || p.Slot != 0 {
		t.Fatalf("id %d decodes to shard %d slot %d, want shard 5 slot 0", id, p.Shard, p.Slot)
	}
	if p.UnixMs < before-1 || p.UnixMs > time.Now().UnixMilli()+1 {
		t.Fatalf("id time %d not within [%d, now]", p.UnixMs, before)
	}
	// The default is bound to this schema's function, whatever the search_path.
	if _, err := conn.Exec(ctx, `SET search_path TO public`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `INSERT INTO shard_0005.likes (user_id, photo_id) VALUES (1, $1) RETURNING id`, id).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if s, _ := layout.ShardOf(id); s != 5 {
		t.Fatalf("likes id shard = %d, want 5", s)
	}
}

func TestNextIDBurstIsUnique(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 1))
	layout := idgen.DefaultLayout()
	if err := shardschema.ApplyShard(ctx, conn, layout, 1234, testSQL, shardschema.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// One statement: now() is constant, and 10,000 IDs need 625 ms of
	// 16-per-ms counters, so the sequence must run ahead of the clock.
	start := time.Now()
	if _, err := conn.Exec(ctx, `INSERT INTO shard_1234.photos (user_id) SELECT g FROM generate_series(1, 10000) g`); err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000-row insert: %v", time.Since(start))
	rows, err := conn.Query(ctx, `SELECT id FROM shard_1234.photos`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		p, _ := layout.Decode(id)
		if p.Shard != 1234 || p.Slot != 0 {
			t.Fatalf("id %d: shard %d slot %d", id, p.Shard, p.Slot)
		}
		seen[id] = true
	}
	if len(ids) != 10000 || len(seen) != 10000 {
		t.Fatalf("%d rows, %d distinct ids, want 10000", len(ids), len(seen))
	}
	// No advisory lock left behind.
	var locks int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d advisory locks held after the insert", locks)
	}
}

func TestApplyShardDeferredIndexes(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 0))
	layout := idgen.DefaultLayout()
	if err := shardschema.ApplyShard(ctx, conn, layout, 7, testSQL, shardschema.ApplyOptions{DeferIndexes: true}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'shard_0007' AND indexname IN ('photos_user_id', 'likes_photo_id', 'follows_pair')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d secondary indexes before ApplyIndexes, want 0", n)
	}
	if err := shardschema.ApplyIndexes(ctx, conn, layout, 7, testSQL); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Fatalf("%d secondary indexes after ApplyIndexes, want 3", n)
	}
	if err := shardschema.DropShard(ctx, conn, 7); err != nil {
		t.Fatal(err)
	}
	if err := shardschema.ApplyShard(ctx, conn, layout, 7, testSQL, shardschema.ApplyOptions{}); err != nil {
		t.Fatalf("re-create after DropShard: %v", err)
	}
}

func TestApplyShardLayoutMismatch(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 0))
	if err := shardschema.ApplyShard(ctx, conn, idgen.DefaultLayout(), 1, nil, shardschema.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	other := idgen.DefaultLayout()
	other.SlotBits = 4
	err := shardschema.ApplyShard(ctx, conn, other, 2, nil, shardschema.ApplyOptions{})
	if !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("err = %v, want ErrLayoutMismatch", err)
	}
}
