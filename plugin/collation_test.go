package plugin

import (
	"errors"
	"testing"
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
