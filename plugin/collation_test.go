package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// icuCaptions gives the photos' caption column an ICU collation on the
// named servers, under which "apple" sorts before "Banana" (bytes put "B"
// first).
func icuCaptions(t testing.TB, e *env, servers ...string) {
	for _, name := range servers {
		e.rawExec(t, name, `DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('ALTER TABLE %I.photos ALTER COLUMN caption TYPE text COLLATE "und-x-icu"', s);
  END LOOP;
END $$`)
	}
}

// TestTextCollationOrderedInPostgres gives the caption an ICU collation
// on every server: a read across shards ordered by it is ordered in
// Postgres, and equals plain GORM on one table of the same collation
// holding the same rows — ascending and descending, with ties, NULL-free
// text of mixed case and accents, LIMIT and OFFSET, plucked values, and
// the min and max of the caption (finished in Postgres, read_merge_agg_final.go).
func TestTextCollationOrderedInPostgres(t *testing.T) {
	e := newEnv(t, envOpts{before: func(e *env) { icuCaptions(t, e, e.servers...) }})
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, `CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text COLLATE "und-x-icu" NOT NULL DEFAULT '',
		likes integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now())`)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"Banana", "apple", "cherry", "Apple", "éclair", "eclair", "Zebra", "zebra", "banana", "apple"}
	var rows []Photo
	for i := range 40 {
		rows = append(rows, Photo{UserID: int64(i%e.shards + 1), Caption: words[i%len(words)], Likes: i % 3})
	}
	if err := e.db.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if err := plain.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	e.p.unionBatch = 3 // several units per server
	defer func() { e.p.unionBatch = 0 }()
	for _, c := range []struct {
		order         string
		limit, offset int
	}{
		{"caption, id", 0, 0},
		{"caption desc, id", 0, 0},
		{"caption, likes desc, id", 7, 0},
		{"caption desc, id desc", 5, 12},
		{"likes, caption, id", 9, 3},
	} {
		q := func(db *gorm.DB) *gorm.DB {
			db = db.Order(c.order)
			if c.limit > 0 {
				db = db.Limit(c.limit)
			}
			if c.offset > 0 {
				db = db.Offset(c.offset)
			}
			return db
		}
		var got, want []Photo
		if err := q(e.db.Clauses(AllShards())).Find(&got).Error; err != nil {
			t.Fatalf("%s: %v", c.order, err)
		}
		if err := q(plain).Find(&want).Error; err != nil {
			t.Fatal(err)
		}
		if g, w := photoRows(got), photoRows(want); !slices.Equal(g, w) {
			t.Errorf("ORDER BY %s LIMIT %d OFFSET %d:\nplugin %v\nplain  %v", c.order, c.limit, c.offset, g, w)
		}
	}
	var got, want []string
	if err := e.db.Clauses(AllShards()).Model(&Photo{}).Order("caption desc").Pluck("caption", &got).Error; err != nil {
		t.Fatal(err)
	}
	if err := plain.Model(&Photo{}).Order("caption desc").Pluck("caption", &want).Error; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("plucked captions:\nplugin %q\nplain  %q", got, want)
	}
	var out, plainOut []map[string]any
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Select("min(caption) AS m, max(caption) AS x").Find(&out).Error; err != nil {
		t.Fatalf("min(caption) across shards: %v", err)
	}
	if err := plain.Model(&Photo{}).Select("min(caption) AS m, max(caption) AS x").Find(&plainOut).Error; err != nil {
		t.Fatal(err)
	}
	if g, w := typed(out), typed(plainOut); g != w {
		t.Errorf("min and max of the caption: plugin %s, plain %s", g, w)
	}
	// maps carry no field to order by: each shard selects the caption
	// again under a hidden alias (hiddenOrderKeys)
	out, plainOut = nil, nil
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Select("id, caption, likes").Order("caption, id").Limit(11).Find(&out).Error; err != nil {
		t.Fatalf("maps ordered by caption across shards: %v", err)
	}
	if err := plain.Model(&Photo{}).Select("id, caption, likes").Order("caption, id").Limit(11).Find(&plainOut).Error; err != nil {
		t.Fatal(err)
	}
	if g, w := typed(out), typed(plainOut); g != w {
		t.Errorf("maps ordered by caption:\nplugin %s\nplain  %s", g, w)
	}
}

// TestTextCollationMixed: the caption is ICU on one server and byte order
// on the other, so no one order holds for all its rows: ordering by it
// across shards is refused, ordering by another column merges.
func TestTextCollationMixed(t *testing.T) {
	e := newEnv(t, envOpts{before: func(e *env) { icuCaptions(t, e, e.servers[0]) }})
	for i, c := range []string{"Banana", "apple", "cherry"} {
		if err := e.db.Create(&Photo{UserID: int64(i + 1), Caption: c}).Error; err != nil {
			t.Fatal(err)
		}
	}
	var ps []Photo
	if err := e.db.Clauses(AllShards()).Order("caption").Find(&ps).Error; !errors.Is(err, ErrUnroutableSQL) || !strings.Contains(err.Error(), "different collations") {
		t.Fatalf("ORDER BY caption across shards: %v (%d rows), want ErrUnroutableSQL for different collations", err, len(ps))
	}
	ps = nil
	if err := e.db.Clauses(AllShards()).Order("id").Find(&ps).Error; err != nil || len(ps) != 3 {
		t.Fatalf("ORDER BY id across shards: %v, %d rows", err, len(ps))
	}
}

// TestTextOrderWithUnreadCollation: a plugin started while a server was
// down has not read that server's collations, so it cannot know that a
// merge in byte order is right there: a multi-shard read ordered by a
// text column is refused (even with Partial), while ordering by an
// integer still merges. Once the server answers, the plugin reads it and
// the same read merges.
func TestTextOrderWithUnreadCollation(t *testing.T) {
	ctx := context.Background()
	c, dsnOf := ownClusterForB(t)
	e := newEnv(t, envOpts{dsnOf: dsnOf})
	for u := int64(1); u <= int64(e.shards); u++ {
		if err := e.db.Create(&Photo{UserID: u, Caption: fmt.Sprintf("c%03d", u)}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	pl := Register(Config{Router: e.r, SkipTableCheck: true, ServerRetry: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second}, &Photo{})
	if err := db.Use(pl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pl.Close() })

	var pr PartialResult
	var ps []Photo
	err = db.Clauses(AllShards(), Partial(&pr)).Order("caption").Find(&ps).Error
	if !errors.Is(err, ErrUnroutableSQL) || !strings.Contains(err.Error(), "server b") {
		t.Fatalf("ORDER BY caption with server b's collations unread: %v (%d rows), want ErrUnroutableSQL naming b", err, len(ps))
	}
	ps = nil
	if err := db.Clauses(AllShards(), Partial(&pr)).Order("user_id").Find(&ps).Error; err != nil || len(ps) == 0 || len(pr.Missing) == 0 {
		t.Fatalf("ORDER BY user_id with server b down: %v, %d rows, missing %v; want a's rows and b's shards missing", err, len(ps), pr.Missing)
	}

	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ps = nil
		err := db.Clauses(AllShards()).Order("caption").Find(&ps).Error
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after server b came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the server's retry interval
	}
	if len(ps) != e.shards || !slices.IsSortedFunc(ps, func(a, b Photo) int { return strings.Compare(a.Caption, b.Caption) }) {
		t.Fatalf("after server b came back: %d rows, sorted %v", len(ps), slices.IsSortedFunc(ps, func(a, b Photo) int { return strings.Compare(a.Caption, b.Caption) }))
	}
}

// TestTextOrderPartial: with the caption in an ICU collation on both
// servers and server b stopped, a Partial read ordered by the caption
// returns a's rows in the collation's order, ordered on a, and lists b's
// shards as missing.
func TestTextOrderPartial(t *testing.T) {
	c, dsnOf := ownClusterForB(t)
	e := newEnv(t, envOpts{dsnOf: dsnOf, before: func(e *env) { icuCaptions(t, e, e.servers...) }})
	words := []string{"Banana", "apple", "cherry", "Apple", "banana"}
	var onA []string
	for u := int64(1); u <= int64(e.shards); u++ {
		w := words[int(u)%len(words)]
		if err := e.db.Create(&Photo{UserID: u, Caption: w}).Error; err != nil {
			t.Fatal(err)
		}
		if e.serverOf(t, e.shardOf(u)) == "a" {
			onA = append(onA, w)
		}
	}
	// Postgres's ICU order of a's captions, read on a.
	var want []string
	if err := e.db.Clauses(Shard(0)).Raw(`SELECT w FROM unnest($1::text[]) AS t(w) ORDER BY w COLLATE "und-x-icu"`, onA).Scan(&want).Error; err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	var pr PartialResult
	var ps []Photo
	if err := e.db.Clauses(AllShards(), Partial(&pr)).Order("caption, id").Find(&ps).Error; err != nil {
		t.Fatalf("Partial read ordered by caption with b down: %v", err)
	}
	got := make([]string, len(ps))
	for i, p := range ps {
		got[i] = p.Caption
	}
	if !slices.Equal(got, want) || pr.Complete() {
		t.Fatalf("captions %q, want a's in ICU order %q; missing %v", got, want, pr.Missing)
	}
}
