package plugin

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/shardkit/shardkit/internal/sqlcond"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// The analysis as a pure function: GORM statements built on a gorm.DB
// that never connects, read against a hand-made 64-shard map.

func offlineDB(t testing.TB) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=/nonexistent"}),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true, Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func testSnapshot(t testing.TB, shards int) *router.Snapshot {
	t.Helper()
	servers := []router.Server{{Name: "a"}, {Name: "b"}}
	var pls []router.Placement
	for i := 0; i < shards; i++ {
		pls = append(pls, router.Placement{Shard: i, Server: servers[i%2].Name, State: router.StateActive})
	}
	s, err := router.NewSnapshot(1, shards, servers, pls)
	if err != nil {
		t.Fatal(err)
	}
	s.Layout = idgen.DefaultLayout()
	return s
}

// analyse returns the shard set of the query q builds, as route sees it.
func analyse(t testing.TB, db *gorm.DB, m *model, snap *router.Snapshot, q func(*gorm.DB) *gorm.DB) (shardSet, error) {
	t.Helper()
	tx := q(db.Model(&Photo{}))
	stmt := tx.Statement
	if err := stmt.Parse(&Photo{}); err != nil {
		t.Fatal(err)
	}
	stmt.ReflectValue = reflect.ValueOf(&[]Photo{}).Elem()
	return m.shardsOf(tx, opQuery, snap)
}

func TestAnalyseConditions(t *testing.T) {
	db := offlineDB(t)
	snap := testSnapshot(t, 64)
	m, err := parseModel(db, &Photo{}, 64)
	if err != nil {
		t.Fatal(err)
	}
	id := func(shard int) int64 { v, _ := snap.Layout.Compose(snap.Layout.EpochMs+1000, shard, 1); return v }
	set := func(xs ...int) shardSet { return shardSet{known: true, list: xs} }
	unknown := shardSet{}
	tests := []struct {
		name string
		q    func(*gorm.DB) *gorm.DB
		want shardSet
	}{
		{"no conditions", func(d *gorm.DB) *gorm.DB { return d }, unknown},
		{"key", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 70) }, set(6)},
		{"key reversed", func(d *gorm.DB) *gorm.DB { return d.Where("? = user_id", 70) }, set(6)},
		{"key literal", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = 70") }, set(6)},
		{"key quoted and qualified", func(d *gorm.DB) *gorm.DB { return d.Where(`"photos"."user_id" = ?`, 70) }, set(6)},
		{"key upper case", func(d *gorm.DB) *gorm.DB { return d.Where("USER_ID = ?", 70) }, set(6)},
		{"key in", func(d *gorm.DB) *gorm.DB { return d.Where("user_id IN ?", []int64{1, 65, 3}) }, set(1, 3)},
		{"key in parens", func(d *gorm.DB) *gorm.DB { return d.Where("user_id IN (?)", []int64{2, 5}) }, set(2, 5)},
		{"id", func(d *gorm.DB) *gorm.DB { return d.Where("id = ?", id(9)) }, set(9)},
		{"primary key inline", func(d *gorm.DB) *gorm.DB { return d.Where(id(9)) }, set(9)},
		{"struct", func(d *gorm.DB) *gorm.DB { return d.Where(&Photo{UserID: 70, Caption: "x"}) }, set(6)},
		{"map in", func(d *gorm.DB) *gorm.DB { return d.Where(map[string]any{"user_id": []int64{1, 2}}) }, set(1, 2)},
		{"and narrows", func(d *gorm.DB) *gorm.DB { return d.Where("user_id IN ?", []int64{1, 2}).Where("user_id = ?", 2) }, set(2)},
		{"and of other columns", func(d *gorm.DB) *gorm.DB { return d.Where("likes > ?", 3).Where("user_id = ?", 2) }, set(2)},
		{"contradiction", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 1).Where("user_id = ?", 2) }, set()},
		{"id of no shard", func(d *gorm.DB) *gorm.DB { return d.Where("id = ?", id(63)+int64(200)<<10) }, set()},
		{"Or", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 1).Or("user_id = ?", 2) }, set(1, 2)},
		{"Or with a keyless branch", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 1).Or("likes = ?", 2) }, unknown},
		{"Or first", func(d *gorm.DB) *gorm.DB { return d.Or("user_id = ?", 1).Where("user_id = ?", 2) }, set(1, 2)},
		{"and binds tighter than Or", func(d *gorm.DB) *gorm.DB {
			return d.Where("user_id = ?", 1).Where("likes = ?", 0).Or("user_id = ?", 2)
		}, set(1, 2)},
		{"key then Or of other columns", func(d *gorm.DB) *gorm.DB {
			return d.Where("user_id = ?", 1).Where(db.Where("likes = ?", 0).Or("likes = ?", 1))
		}, set(1)},
		{"grouped Or", func(d *gorm.DB) *gorm.DB { return d.Where(db.Where("user_id = ?", 1).Or("user_id = ?", 2)) }, set(1, 2)},
		{"or in one string", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ? or user_id = ?", 1, 2) }, set(1, 2)},
		{"or in one string and", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ? or user_id = ?", 1, 2).Where("user_id = ?", 2) }, set(2)},
		{"or without spaces GORM looks for", func(d *gorm.DB) *gorm.DB {
			return d.Where("user_id = ?", 1).Where("likes = 0 OR\nuser_id = ?", 2)
		}, set(1, 2)},
		{"not", func(d *gorm.DB) *gorm.DB { return d.Not("user_id = ?", 1) }, unknown},
		{"not in", func(d *gorm.DB) *gorm.DB { return d.Not(map[string]any{"user_id": []int64{1}}) }, unknown},
		{"not and key", func(d *gorm.DB) *gorm.DB { return d.Not("likes = ?", 1).Where("user_id = ?", 3) }, set(3)},
		{"expression on the key", func(d *gorm.DB) *gorm.DB { return d.Where("user_id + 0 = ?", 1) }, unknown},
		{"cast", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?::bigint", 1) }, unknown},
		{"between", func(d *gorm.DB) *gorm.DB { return d.Where("user_id BETWEEN ? AND ?", 1, 1) }, unknown},
		{"between then or", func(d *gorm.DB) *gorm.DB { return d.Where("likes BETWEEN 1 AND 2 OR user_id = ?", 1) }, unknown},
		{"case", func(d *gorm.DB) *gorm.DB { return d.Where("CASE WHEN likes > 0 AND user_id = ? THEN true END", 1) }, unknown},
		{"sub-query value", func(d *gorm.DB) *gorm.DB { return d.Where("user_id IN (?)", db.Table("u").Select("id")) }, unknown},
		{"expression value", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", gorm.Expr("1 OR true")) }, unknown},
		{"unbalanced fragment", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 1).Where("true) OR (true") }, unknown},
		{"comment", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ? -- x", 1) }, unknown},
		{"string literal", func(d *gorm.DB) *gorm.DB { return d.Where("caption = 'a OR b' AND user_id = ?", 4) }, set(4)},
		{"other table's column", func(d *gorm.DB) *gorm.DB { return d.Where("likes.user_id = ?", 4) }, unknown},
		{"null", func(d *gorm.DB) *gorm.DB { return d.Where(map[string]any{"user_id": nil}) }, unknown},
		{"empty in", func(d *gorm.DB) *gorm.DB { return d.Where("user_id IN ?", []int64{}) }, set()},
		{"id and key of other shards", func(d *gorm.DB) *gorm.DB { return d.Where("user_id = ?", 1).Where("id = 0 OR\nuser_id = ?", 2) }, set(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := analyse(t, db, m, snap, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got.known != tt.want.known || got.all != tt.want.all || fmt.Sprint(got.list) != fmt.Sprint(tt.want.list) {
				t.Fatalf("shards = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzConditionReader: whatever the condition text, the reader never
// panics, and a condition it reads as one set of shards still reads so
// when AND-ed with a condition it cannot read, while an OR with such a
// condition leaves it unknown.
func FuzzConditionReader(f *testing.F) {
	for _, s := range []string{"user_id = ?", "user_id IN (?, ?) OR id = ?", "(user_id = ?) AND NOT (x)",
		"a BETWEEN ? AND ?", "\"photos\".\"user_id\" = $1", "user_id = ? OR\nx", "((", "'?''", "E'\\''"} {
		f.Add(s)
	}
	db := offlineDB(f)
	snap := testSnapshot(f, 64)
	m, err := parseModel(db, &Photo{}, 64)
	if err != nil {
		f.Fatal(err)
	}
	stmt := &gorm.Statement{DB: db, Table: "photos"}
	f.Fuzz(func(t *testing.T, sql string) {
		toks, params, ok := sqlcond.Lex(sql, true, nil)
		if !ok {
			return
		}
		vars := make([]any, params)
		for i := range vars {
			vars[i] = int64(i)
		}
		r := condReader{toks: toks, m: m, stmt: stmt, snap: snap, vars: vars}
		got, err := r.expr(0, len(toks))
		if err != nil || !got.known {
			return
		}
		for _, s := range got.list {
			if s < 0 || s >= 64 {
				t.Fatalf("shard %d out of range", s)
			}
		}
	})
}

// TestEqualityFastPath checks that a `column = ?` fragment, read without
// the walk through OR/AND/NOT, names the same shards (or the same error)
// as the full reader, for key, ID, other and quoted columns and for
// values of every kind.
func TestEqualityFastPath(t *testing.T) {
	db := offlineDB(t)
	snap := testSnapshot(t, 64)
	m, err := parseModel(db, &Photo{}, 64)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := snap.Layout.Compose(snap.Layout.EpochMs+1000, 9, 1)
	stmt := db.Model(&Photo{}).Statement
	if err := stmt.Parse(&Photo{}); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"user_id = ?", "id = ?", "caption = ?", `"user_id" = ?`, "USER_ID = ?", `"User_Id" = ?`, "likes = ?"} {
		f := fragmentOf(sql)
		if !f.eq {
			t.Fatalf("%q: not read as column = ?", sql)
		}
		for _, v := range []any{int64(70), 70, uint(3), id, "70", nil, -1, []int{1, 2}} {
			r := condReader{toks: f.toks, m: m, stmt: stmt, snap: snap, vars: []any{v}}
			full, ferr := r.expr(0, len(f.toks))
			got, fast, gerr := m.fastShards(stmt, []clause.Expression{clause.Expr{SQL: sql, Vars: []any{v}}}, snap)
			if !fast {
				continue // values the fast path leaves to the exact path
			}
			if (ferr == nil) != (gerr == nil) || !reflect.DeepEqual(full, got) {
				t.Errorf("%q with %#v: fast path %v, %v; full reader %v, %v", sql, v, got, gerr, full, ferr)
			}
		}
	}
	for _, sql := range []string{"user_id = ? OR id = ?", "user_id IN ?", "photos.user_id = ?", "not = ?", "user_id = 7"} {
		if fragmentOf(sql).eq {
			t.Errorf("%q read as column = ?", sql)
		}
	}
}
