package plugin

import (
	"context"
	"database/sql/driver"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/internal/pgorder"
)

// tallyScans counts the values GORM scans into tallied fields.
var tallyScans atomic.Int64

// tallied is text that counts how often it is scanned.
type tallied string

func (s *tallied) Scan(src any) error {
	tallyScans.Add(1)
	switch v := src.(type) {
	case string:
		*s = tallied(v)
	case []byte:
		*s = tallied(v)
	case nil:
		*s = ""
	default:
		return fmt.Errorf("tallied: %T", src)
	}
	return nil
}

func (s tallied) Value() (driver.Value, error) { return string(s), nil }

// Tally's Note counts its scans; Score is an integer field on a numeric
// column, whose raw values (numeric text) are not of the field's kind.
type Tally struct {
	ID     int64
	UserID int64 `shard:"key"`
	Note   tallied
	Score  int64
}

const talliesDDL = `CREATE TABLE %s (id bigint PRIMARY KEY %s, user_id bigint NOT NULL, note text NOT NULL, score numeric NOT NULL)`

// TestLateScanScansOnlyThePage: a read of rows with a LIMIT across shards
// scans only the rows of its page, once, and answers as plain GORM on one
// table with the same rows does; where a key's raw values are not of its
// field's kind (numeric into int64), and where servers answer with
// different columns (one server's tables have a column more), the read
// still answers as one table does.
func TestLateScanScansOnlyThePage(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOpts{models: []any{&Tally{}}, serial: true, before: shardTables(t, talliesDDL, "tallies")})
	plain, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 0)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Exec(fmt.Sprintf(talliesDDL, "tallies", "")).Error; err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		r := Tally{UserID: int64(i + 1), Note: tallied(fmt.Sprintf("n%02d", i)), Score: int64(i*37%11 - 5)}
		if err := e.db.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
	}
	type read struct {
		name  string
		q     func(db *gorm.DB) *gorm.DB
		first bool
		scans int64 // at most this many scans of Note across shards; 0: not counted
	}
	reads := []read{
		{"id desc limit 7", func(db *gorm.DB) *gorm.DB { return db.Order("id desc").Limit(7) }, false, 7},
		{"id limit 5 offset 4", func(db *gorm.DB) *gorm.DB { return db.Order("id").Limit(5).Offset(4) }, false, 5},
		{"limit 6, no order", func(db *gorm.DB) *gorm.DB { return db.Limit(6) }, false, 6},
		{"first", func(db *gorm.DB) *gorm.DB { return db }, true, 1},
		{"user_id desc, id limit 9", func(db *gorm.DB) *gorm.DB { return db.Order("user_id desc, id").Limit(9) }, false, 9},
		{"numeric score into int64, limit 8", func(db *gorm.DB) *gorm.DB { return db.Order("score, id").Limit(8) }, false, 0},
		{"select *, id desc limit 7", func(db *gorm.DB) *gorm.DB { return db.Select("*").Order("id desc").Limit(7) }, false, 7},
	}
	check := func(t *testing.T, r read) {
		var got, want []Tally
		tallyScans.Store(0)
		if r.first {
			var g Tally
			if err := r.q(e.db.Clauses(AllShards())).First(&g).Error; err != nil {
				t.Fatal(err)
			}
			got = []Tally{g}
		} else if err := r.q(e.db.Clauses(AllShards())).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		scans := tallyScans.Load()
		if r.first {
			var w Tally
			if err := r.q(plain).First(&w).Error; err != nil {
				t.Fatal(err)
			}
			want = []Tally{w}
		} else if err := r.q(plain).Find(&want).Error; err != nil {
			t.Fatal(err)
		}
		if r.name != "limit 6, no order" && !reflect.DeepEqual(got, want) {
			t.Fatalf("across %d shards:\n got %v\nwant %v (one table)", e.shards, got, want)
		}
		if len(got) != len(want) {
			t.Fatalf("%d rows, one table %d", len(got), len(want))
		}
		switch {
		case r.scans > 0 && scans != r.scans:
			t.Errorf("%d values of Note scanned for a page of %d", scans, r.scans)
		case r.scans == 0 && scans <= int64(len(got)):
			t.Errorf("%d values of Note scanned: a key whose raw values are not of its field's kind is scanned as its answer arrives", scans)
		}
	}
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) { check(t, r) })
	}
	// One server's tables get a column more: its answers to SELECT * come
	// with other columns than the other's.
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	altered := e.servers[len(e.servers)-1]
	for _, pl := range snap.Placements() {
		if pl.Server == altered {
			e.rawExec(t, pl.Server, "ALTER TABLE "+pgx.Identifier{pl.Schema, "tallies"}.Sanitize()+" ADD COLUMN extra text DEFAULT 'x'")
		}
	}
	for _, r := range reads {
		t.Run("columns differ/"+r.name, func(t *testing.T) { check(t, r) })
	}
}

// TestPageCutDropsOnlyWhatCannotEnter: a statement's rows, dropped as
// they arrive by the cut of a full page, are exactly those the page's
// merge would drop: checked against merging each row on its own into a
// copy of the page, for rows before, tied with and after the page's last
// row, from units before and after the last row's, NULLs, and a key
// value of another kind (which stops the cut: that row and every later
// one are kept).
func TestPageCutDropsOnlyWhatCannotEnter(t *testing.T) {
	keys := []orderKey{{name: "id", desc: true}}
	m := pgtype.NewMap()
	fds := []pgconn.FieldDescription{{Name: "id", DataTypeOID: pgtype.Int8OID, Format: pgx.BinaryFormatCode}}
	cols, conv := describeColumns(m, fds)
	wire := func(v int64) []byte {
		b, err := m.Encode(pgtype.Int8OID, pgx.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A page of 3 rows (ids 90, 80, 70 descending), the last from unit 2.
	page := func() *pageMerger {
		pm := newPageMerger(lateRowsType, keys, 3)
		rows := []lateRow{{cols: 0}, {cols: 0}, {cols: 0}}
		hk := [][]pgorder.Value{{pgorder.Of(pgorder.Int, int64(90))}, {pgorder.Of(pgorder.Int, int64(80))}, {pgorder.Of(pgorder.Int, int64(70))}}
		pm.add(2, reflect.ValueOf(rows), hk, nil)
		return pm
	}
	f := &pageFilter{page: page(), names: []string{"id"}, kinds: []pgorder.Kind{pgorder.Int}, dropped: new(atomic.Int64)}
	for _, c := range []struct {
		name string
		unit int
		raw  []byte // nil: NULL
	}{
		{"before the last", 5, wire(75)},
		{"after the last", 5, wire(60)},
		{"tied, later unit", 5, wire(70)},
		{"tied, earlier unit", 1, wire(70)},
		{"NULL (first in DESC)", 5, nil},
		{"best of all", 0, wire(100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			cut := f.cut(cols, conv, c.unit)
			if cut == nil {
				t.Fatal("no cut for a statement with its key column")
			}
			got := cut.drop([][]byte{c.raw})
			// The page's own verdict: merge the row into a copy and see
			// whether it stays.
			pm := page()
			var v any
			if c.raw != nil {
				v, _ = conv[0](c.raw)
			}
			kv := []pgorder.Value{pgorder.FromReflect(reflect.ValueOf(v))}
			mark := []lateRow{{cols: 99}}
			pm.add(c.unit, reflect.ValueOf(mark), [][]pgorder.Value{kv}, nil)
			stays := false
			for _, r := range pm.page(0, -1).Interface().([]lateRow) {
				stays = stays || r.cols == 99
			}
			if got != !stays {
				t.Fatalf("drop = %v, but the merge keeps the row: %v", got, stays)
			}
		})
	}
	// A key of another kind stops the cut for the rest of the statement.
	tcols, tconv := describeColumns(m, []pgconn.FieldDescription{{Name: "id", DataTypeOID: pgtype.TextOID, Format: pgx.TextFormatCode}})
	cut := f.cut(tcols, tconv, 5)
	if cut.drop([][]byte{[]byte("1")}) || !cut.stop {
		t.Fatal("a text key of an integer field was not kept, or did not stop the cut")
	}
	if cut.drop([][]byte{[]byte("0")}) {
		t.Fatal("a row after the cut stopped was dropped")
	}
	// No key column: no cut.
	if f.cut([]memrows.Column{{Name: "other"}}, conv, 5) != nil {
		t.Fatal("a cut without the key column")
	}
	// A page not yet full drops nothing.
	open := &pageFilter{page: newPageMerger(lateRowsType, keys, 3), names: f.names, kinds: f.kinds, dropped: f.dropped}
	if open.cut(cols, conv, 5).drop([][]byte{wire(1)}) {
		t.Fatal("a row dropped before the page was full")
	}
}

// TestPageCutAgainstOneTable reads every shard ordered, with LIMIT and
// OFFSET, in statements of two shards each, so that most statements
// answer after the page is full and drop rows as they arrive: each read
// must give what plain GORM reads from one table of the same rows, and
// the reads together must have dropped rows (or the test checks nothing
// of the cut).
func TestPageCutAgainstOneTable(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64, noIDs: true})
	e.p.unionBatch = 2
	plain := seedScatter(t, e, 6)
	type row struct {
		ID      int64
		UserID  int64
		Caption string
		Likes   int
	}
	before := e.p.cutRows.Load()
	for _, c := range []struct {
		order         string
		limit, offset int
	}{
		{"id desc", 7, 0},
		{"id", 10, 3},
		{"likes desc, id", 20, 0},
		{"likes, id desc", 5, 40},
		{"user_id desc", 30, 0},
		{"id desc", 1, 0},
		{"likes desc, user_id", 50, 100},
	} {
		var got, want []row
		if err := e.db.Model(&Photo{}).Clauses(AllShards()).Order(c.order).Limit(c.limit).Offset(c.offset).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Table("photos").Order(c.order).Limit(c.limit).Offset(c.offset).Find(&want).Error; err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ORDER BY %s LIMIT %d OFFSET %d:\n got %v\nwant %v", c.order, c.limit, c.offset, got, want)
		}
	}
	if e.p.cutRows.Load() == before {
		t.Fatal("no row was dropped as it arrived: the reads did not exercise the cut")
	}
}
