package plugin

import (
	"context"
	"database/sql/driver"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
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
