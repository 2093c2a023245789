package backup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/router"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

const testShard = 2

// env is a catalog on cluster 0 with 4 shards on one server (cluster 1),
// holding the shared photos schema and backup's own additions.
type env struct {
	cat    *catalog.Catalog
	server string // the server's DSN
	layout idgen.Layout
}

// shardSQL is the shared photos schema and backup's types (testdata/shardsql).
var shardSQL = photos.With(os.DirFS("testdata/shardsql"))

func newEnv(t *testing.T) *env {
	t.Helper()
	se := shardtest.New(t, shardtest.Spec{Servers: []string{"one"}, Clusters: []int{1}, Shards: 4, ShardSQL: shardSQL})
	return &env{cat: se.Catalog, server: se.DSN["one"], layout: idgen.DefaultLayout()}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fill writes rows of every kind into the shard: next_id() keys in one
// statement and one by one, application keys from a generator in slot
// slot, and tag rows.
func (e *env) fill(t *testing.T, slot, n int) {
	t.Helper()
	ctx := testCtx(t)
	conn := pgtest.Connect(t, e.server)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO shard_0002.photos (user_id, caption, taken, score, price, raw, meta)
		SELECT 2 + 4 * g, 'row ' || g, timestamptz '2024-03-01 12:00:00+02' + g * interval '1 minute 0.25 second',
		       g / 7.0, g * 1.125, int4send(g), jsonb_build_object('g', g, 'odd', g % 2 = 1)
		FROM generate_series(1, $1::integer) g`, n)
	for range 20 {
		exec(`INSERT INTO shard_0002.photos (user_id) VALUES (6)`)
	}
	g, err := idgen.New(e.layout, idgen.NewLease(slot, 0, "test", 0, time.Now().Add(time.Hour), 1<<62), idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := g.NextN(ctx, testShard, n)
	if err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO shard_0002.photos (id, user_id, caption, score) SELECT i, 10, 'app', 0.1 FROM unnest($1::bigint[]) i`, ids)
	exec(`INSERT INTO shard_0002.tags SELECT id, t FROM shard_0002.photos, unnest(ARRAY['a', 'b']) t WHERE id % 3 = 0 ON CONFLICT DO NOTHING`)
}

// contents is an independent fingerprint of the shard's rows and SQL
// versions: md5 of every table's rows in key order.
func (e *env) contents(t *testing.T, dsn string) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	conn := pgtest.Connect(t, dsn)
	out := map[string]string{}
	for name, q := range map[string]string{
		"photos":   `SELECT count(*) || ':' || md5(coalesce(string_agg(p::text, '|' ORDER BY id), '')) FROM shard_0002.photos p`,
		"tags":     `SELECT count(*) || ':' || md5(coalesce(string_agg(t::text, '|' ORDER BY photo_id, tag), '')) FROM shard_0002.tags t`,
		"versions": `SELECT string_agg(version || part || name, ',' ORDER BY version, part) FROM shardkit.shard_migrations WHERE schema_name = 'shard_0002'`,
		"indexes":  `SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'shard_0002'`,
	} {
		var s *string
		if err := conn.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s != nil {
			out[name] = *s
		}
	}
	return out
}

func equalContents(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s: %s is %q, want %q", what, k, got[k], w)
		}
	}
}

func (e *env) dump(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	m, err := Dump(testCtx(t), e.cat, testShard, &buf, DumpOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Shard != testShard || m.Server != "one" || len(m.Tables) != 4 || len(m.Versions) != 4 {
		t.Fatalf("manifest %+v", m)
	}
	return buf.Bytes()
}

func (e *env) maxID(t *testing.T, dsn string) int64 {
	t.Helper()
	var id int64
	if err := pgtest.Connect(t, dsn).QueryRow(testCtx(t), `SELECT coalesce(max(id), 0) FROM shard_0002.photos`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// newIDs inserts rows with next_id() (a burst and single rows) and with a
// fresh generator, and returns the smallest new ID of each kind.
func (e *env) newIDs(t *testing.T, slot int) (db, app int64) {
	t.Helper()
	ctx := testCtx(t)
	conn := pgtest.Connect(t, e.server)
	if err := conn.QueryRow(ctx, `WITH n AS (INSERT INTO shard_0002.photos (user_id) SELECT 2 FROM generate_series(1, 100) RETURNING id)
		SELECT min(id) FROM n`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	g, err := idgen.New(e.layout, idgen.NewLease(slot, 0, "test", 0, time.Now().Add(time.Hour), 1<<62), idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	app, err = g.Next(ctx, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO shard_0002.photos (id, user_id) VALUES ($1, 2)`, app); err != nil {
		t.Fatal(err)
	}
	return db, app
}

func (e *env) state(t *testing.T) (router.ShardState, int64) {
	t.Helper()
	snap, err := e.cat.Load(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := snap.Placement(testShard)
	return p.State, snap.Version
}

// TestRestoreReplacesTheShard: dump, keep writing (a burst of next_id()
// rows that runs ahead of the clock, updates, deletes), then restore into
// the shard's home: the rows are the dump's again, the map went fenced and
// back, next_id() issues above every ID it ever issued (including the
// ones written after the dump, minutes ahead of the clock), and a
// generator above every restored ID.
func TestRestoreReplacesTheShard(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.fill(t, 3, 500)
	before := e.contents(t, e.server)
	dump := e.dump(t)
	dumpedMax := e.maxID(t, e.server)

	pgtest.Exec(t, e.server, `INSERT INTO shard_0002.photos (user_id) SELECT 2 FROM generate_series(1, 5000)`)
	// A long burst runs next_id() minutes ahead of the clock (here made
	// with setval): after the restore the clock alone would not be past it.
	pgtest.Exec(t, e.server, `SELECT setval('shard_0002.id_seq', last_value + (600000 << 4)) FROM shard_0002.id_seq`)
	pgtest.Exec(t, e.server, `INSERT INTO shard_0002.photos (user_id) VALUES (2)`)
	pgtest.Exec(t, e.server, `UPDATE shard_0002.photos SET caption = 'changed' WHERE id % 5 = 0`)
	pgtest.Exec(t, e.server, `DELETE FROM shard_0002.tags WHERE tag = 'a'`)
	afterMax := e.maxID(t, e.server)
	if afterMax <= dumpedMax {
		t.Fatalf("rows after the dump have IDs up to %d, the dump up to %d", afterMax, dumpedMax)
	}
	_, v0 := e.state(t)

	if _, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{}); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("Restore without Replace = %v, want ErrNotConfirmed", err)
	}
	if got := e.maxID(t, e.server); got != afterMax {
		t.Fatal("an unconfirmed restore changed the shard")
	}
	res, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	equalContents(t, "after restore", e.contents(t, e.server), before)
	st, v := e.state(t)
	if st != router.StateActive || v != v0+2 || res.MapVersion != v {
		t.Fatalf("after restore the shard is %s at map version %d (result %d), want active at %d (fenced, then unfenced)", st, v, res.MapVersion, v0+2)
	}
	// next_id() is carried past every ID it issued, the lost ones too; a
	// generator's IDs (clock time, their own slot) are above the restored ones.
	db, app := e.newIDs(t, 4)
	if db <= afterMax {
		t.Fatalf("first next_id() ID after the restore %d is not above %d, the newest ID before it", db, afterMax)
	}
	if app <= dumpedMax {
		t.Fatalf("first generator ID after the restore %d is not above %d, the newest restored ID", app, dumpedMax)
	}
	t.Logf("restored %d rows; id_seq carried to %d; new IDs from %d (newest before the restore %d)", res.Manifest.Rows(), res.IDSeq, min(db, app), afterMax)
}

// TestDumpDropRestore: dump, drop the schema and its SQL versions, restore:
// the same rows, versions and indexes, and next_id() above every restored ID.
// A writer inserts all through the dump: the manifest's checksums and the
// archive must come from the same snapshot, or the restore refuses.
func TestDumpDropRestore(t *testing.T) {
	e := newEnv(t)
	e.fill(t, 3, 300)
	ctx := testCtx(t)
	// The writer stops between inserts, not by cancelling one: a
	// cancelled INSERT's backend may still commit after the client has
	// gone, and a row landing after the DELETE below would be counted in
	// "before" but be in no dump.
	var stopped atomic.Bool
	stop := func() { stopped.Store(true) }
	writer := make(chan int)
	go func() {
		conn, err := pgx.Connect(ctx, e.server)
		n := 0
		for err == nil && !stopped.Load() {
			_, err = conn.Exec(ctx, `INSERT INTO shard_0002.photos (user_id, caption) VALUES (6, 'during the dump')`)
			n++
		}
		if conn != nil {
			_ = conn.Close(context.Background())
		}
		writer <- n
	}()
	for e.maxID(t, e.server) == 0 || func() bool {
		var n int
		_ = pgtest.Connect(t, e.server).QueryRow(ctx, `SELECT count(*) FROM shard_0002.photos WHERE caption = 'during the dump'`).Scan(&n)
		return n < 10
	}() {
		time.Sleep(5 * time.Millisecond)
	}
	m, err := Dump(ctx, e.cat, testShard, io.Discard, DumpOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	m2, err := Dump(ctx, e.cat, testShard, &buf, DumpOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if n := <-writer; n < 20 || m2.Rows() <= m.Rows() {
		t.Fatalf("the writer inserted %d rows; dumps held %d then %d rows: the dumps did not run under writes", n, m.Rows(), m2.Rows())
	}
	dump := buf.Bytes()
	pgtest.Exec(t, e.server, `DELETE FROM shard_0002.photos WHERE id > $1`, m2.NewestID)
	before := e.contents(t, e.server)
	dumpedMax := m2.NewestID
	pgtest.Exec(t, e.server, `DROP SCHEMA shard_0002 CASCADE`)
	pgtest.Exec(t, e.server, `DELETE FROM shardkit.shard_migrations WHERE schema_name = 'shard_0002'`)
	if _, err := Restore(testCtx(t), e.cat, bytes.NewReader(dump), RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	equalContents(t, "after drop and restore", e.contents(t, e.server), before)
	if db, app := e.newIDs(t, 5); db <= dumpedMax || app <= dumpedMax {
		t.Fatalf("new IDs %d (next_id) and %d (generator), restored IDs up to %d", db, app, dumpedMax)
	}
}

// TestRestoreIntoScratch: a scratch database gets the schema and rows; the
// catalog and the shard's home do not change; a second restore there is refused.
func TestRestoreIntoScratch(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.fill(t, 3, 200)
	before := e.contents(t, e.server)
	dump := e.dump(t)
	pgtest.Exec(t, e.server, `INSERT INTO shard_0002.photos (user_id) VALUES (2)`)
	after := e.contents(t, e.server)
	_, v0 := e.state(t)
	scratch := pgtest.NewDatabase(t, 0)
	res, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{Into: scratch})
	if err != nil {
		t.Fatal(err)
	}
	if res.Server != "" || res.MapVersion != 0 {
		t.Fatalf("scratch restore result %+v", res)
	}
	equalContents(t, "scratch", e.contents(t, scratch), before)
	equalContents(t, "home after a scratch restore", e.contents(t, e.server), after)
	if _, v := e.state(t); v != v0 {
		t.Fatalf("a scratch restore changed the map version %d -> %d", v0, v)
	}
	if _, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{Into: scratch}); !errors.Is(err, ErrSchemaExists) {
		t.Fatalf("second scratch restore = %v, want ErrSchemaExists", err)
	}
}

// retouch rewrites a dump's manifest with change applied.
func retouch(t *testing.T, dump []byte, change func(*Manifest)) []byte {
	t.Helper()
	m, rest, err := ReadHeader(bytes.NewReader(dump))
	if err != nil {
		t.Fatal(err)
	}
	change(m)
	var buf bytes.Buffer
	if err := writeHeader(&buf, m); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&buf, rest); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreRollsBack: a dump whose rows do not match its manifest, or a
// truncated archive, changes nothing and leaves the shard active.
func TestRestoreRollsBack(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.fill(t, 3, 100)
	dump := e.dump(t)
	pgtest.Exec(t, e.server, `INSERT INTO shard_0002.photos (user_id) VALUES (2)`)
	live := e.contents(t, e.server)
	bad := retouch(t, dump, func(m *Manifest) {
		for i := range m.Tables {
			if m.Tables[i].Name == "photos" {
				m.Tables[i].Rows++
			}
		}
	})
	if _, err := Restore(ctx, e.cat, bytes.NewReader(bad), RestoreOptions{Replace: true}); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("restore of a dump with a wrong row count = %v, want ErrChecksumMismatch", err)
	}
	equalContents(t, "after a failed restore", e.contents(t, e.server), live)
	truncated := dump[:len(dump)-len(dump)/3]
	_, err := Restore(ctx, e.cat, bytes.NewReader(truncated), RestoreOptions{Replace: true})
	var te *ToolError
	if !errors.As(err, &te) {
		t.Fatalf("restore of a truncated dump = %v, want a *ToolError", err)
	}
	equalContents(t, "after a truncated restore", e.contents(t, e.server), live)
	if st, _ := e.state(t); st != router.StateActive {
		t.Fatalf("shard %s after failed restores, want active", st)
	}
}

// TestRestoreRefuses: a moving shard, and a dump from another layout.
func TestRestoreRefuses(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	dump := e.dump(t)
	other := retouch(t, dump, func(m *Manifest) { m.Shards = 8 })
	if _, err := Restore(ctx, e.cat, bytes.NewReader(other), RestoreOptions{Replace: true}); !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("restore of another catalog's dump = %v, want ErrLayoutMismatch", err)
	}
	home, _, err := e.cat.Placement(ctx, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.PlaceShard(ctx, testShard, home, router.StateMoving); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{Replace: true}); !errors.Is(err, ErrShardBusy) {
		t.Fatalf("restore of a moving shard = %v, want ErrShardBusy", err)
	} else if !strings.Contains(err.Error(), "Mover Complete or Rollback") {
		t.Fatalf("the busy error %q does not say the way out", err)
	}
	if st, _ := e.state(t); st != router.StateMoving {
		t.Fatalf("a refused restore left the shard %s", st)
	}
	pgtest.Exec(t, e.server, `DROP SCHEMA shard_0003 CASCADE`)
	if _, err := Dump(ctx, e.cat, 3, io.Discard, DumpOptions{}); !errors.Is(err, ErrNoSchema) {
		t.Fatalf("dump of a missing schema = %v, want ErrNoSchema", err)
	}
}
