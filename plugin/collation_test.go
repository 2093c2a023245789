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
)

// TestTextCollationRefused gives the photos' caption column an ICU
// collation, under which "apple" sorts before "Banana" (bytes put "B"
// first): a merge across shards ordered by the caption, or taking its
// min, would answer in the wrong order, so it is refused; ordering by
// other columns still merges.
func TestTextCollationRefused(t *testing.T) {
	e := newEnv(t, envOpts{before: func(e *env) {
		for _, name := range e.servers {
			e.rawExec(t, name, `DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('ALTER TABLE %I.photos ALTER COLUMN caption TYPE text COLLATE "und-x-icu"', s);
  END LOOP;
END $$`)
		}
	}})
	for i, c := range []string{"Banana", "apple", "cherry"} {
		if err := e.db.Create(&Photo{UserID: int64(i + 1), Caption: c}).Error; err != nil {
			t.Fatal(err)
		}
	}
	var ps []Photo
	if err := e.db.Clauses(AllShards()).Order("caption").Find(&ps).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("ORDER BY caption across shards: %v (%d rows), want ErrUnroutableSQL", err, len(ps))
	}
	var out []map[string]any
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Select("min(caption) AS m").Find(&out).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("min(caption) across shards: %v %v, want ErrUnroutableSQL", err, out)
	}
	ps = nil
	if err := e.db.Clauses(AllShards()).Order("id").Find(&ps).Error; err != nil || len(ps) != 3 {
		t.Fatalf("ORDER BY id across shards: %v, %d rows", err, len(ps))
	}
	// One shard: Postgres orders it; nothing to merge.
	ps = nil
	if err := e.db.Where("user_id = ?", 1).Order("caption").Find(&ps).Error; err != nil || len(ps) != 1 {
		t.Fatalf("one shard: %v, %d rows", err, len(ps))
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
	pl := Register(Config{Router: e.r, SkipTableCheck: true, SkipWarmUp: true, ServerRetry: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second}, &Photo{})
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
