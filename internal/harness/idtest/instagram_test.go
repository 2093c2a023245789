package idtest

import (
	"context"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, 1) }

// instagramNextID is Instagram's function as published in "Sharding & IDs
// at Instagram" (2012), for logical shard 5 in schema insta5, unchanged
// but for the `%%` of the post's Python string becoming `%`.
const instagramNextID = `
CREATE SCHEMA insta5;
CREATE SEQUENCE insta5.table_id_seq;
CREATE OR REPLACE FUNCTION insta5.next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta5.table_id_seq') % 1024 INTO seq_id;

    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE PLPGSQL;
`

// TestInstagramNextIDDecodes: every ID made by Instagram's original
// next_id() decodes with idgen's default layout to shard 5, the sequence
// value the function used (nextval % 1024, across wrap-arounds), and a
// time inside the test's window.
func TestInstagramNextIDDecodes(t *testing.T) {
	dsn := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, dsn, instagramNextID)
	conn := pgtest.Connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	layout := idgen.DefaultLayout()

	check := func(id, nextval int64, from, to time.Time) {
		t.Helper()
		p, err := layout.Decode(id)
		if err != nil {
			t.Fatalf("Decode(%d): %v", id, err)
		}
		if p.Shard != 5 || int64(p.Seq) != nextval%1024 {
			t.Fatalf("ID %d (nextval %d) decodes to shard %d seq %d, want 5 and %d", id, nextval, p.Shard, p.Seq, nextval%1024)
		}
		// The function floors to the ms; allow the ms the window starts in.
		if p.UnixMs < from.UnixMilli() || p.UnixMs > to.UnixMilli() {
			t.Fatalf("ID %d has time %s, outside the test window [%s, %s]", id, p.Time, from, to)
		}
		if s, _ := layout.ShardOf(id); s != 5 {
			t.Fatalf("ShardOf(%d) = %d", id, s)
		}
	}

	// One at a time, with the sequence value read back in the same session.
	for range 50 {
		from := time.Now()
		var id, nextval int64
		if err := conn.QueryRow(ctx, `SELECT insta5.next_id()`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT currval('insta5.table_id_seq')`).Scan(&nextval); err != nil {
			t.Fatal(err)
		}
		check(id, nextval, from, time.Now())
	}

	// In bulk, past two wrap-arounds of the 10-bit sequence: the rows come
	// in call order, each with the next sequence value.
	from := time.Now()
	rows, err := conn.Query(ctx, `SELECT insta5.next_id(), currval('insta5.table_id_seq') FROM generate_series(1, 2500)`)
	if err != nil {
		t.Fatal(err)
	}
	var ids, vals []int64
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		ids, vals = append(ids, id), append(vals, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	to := time.Now()
	if len(ids) != 2500 {
		t.Fatalf("%d rows", len(ids))
	}
	seen := map[int64]bool{}
	for i, id := range ids {
		if vals[i] != 51+int64(i) {
			t.Fatalf("row %d used sequence value %d, want %d", i, vals[i], 51+i)
		}
		check(id, vals[i], from, to)
		seen[id] = true
	}
	// Round trip: Compose with the decoded parts gives the same ID.
	p, _ := layout.Decode(ids[0])
	if again, err := layout.Compose(p.UnixMs, p.Shard, p.Seq); err != nil || again != ids[0] {
		t.Fatalf("Compose(Decode(%d)) = %d, %v", ids[0], again, err)
	}
	t.Logf("%d IDs from Instagram's next_id() decode to shard 5 with their sequence values; %d distinct in the bulk run", len(ids)+50, len(seen))
}
