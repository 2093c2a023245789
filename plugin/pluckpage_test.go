package plugin

import (
	"fmt"
	"reflect"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// Sparse has a nullable column whose NULLs a plain int32 cannot hold.
type Sparse struct {
	ID     int64
	UserID int64 `shard:"key"`
	N      *int32
	Tag    *string
}

const sparsesDDL = `CREATE TABLE %s (id bigint PRIMARY KEY %s, user_id bigint NOT NULL, n int4, tag text)`

// TestPageRowsOnlyScanned: a read across shards in several statements
// (small union batches) converts into the destination only the rows of
// its page. A NULL past the page, in a field that cannot hold it, does
// not fail the read, as it does not on one table, where Postgres never
// returns that row; a NULL in the page fails it as it fails plain GORM.
func TestPageRowsOnlyScanned(t *testing.T) {
	e := newEnv(t, envOpts{models: []any{&Sparse{}}, before: shardTables(t, sparsesDDL, "sparses")})
	plain, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 0)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Exec(fmt.Sprintf(sparsesDDL, "sparses", "")).Error; err != nil {
		t.Fatal(err)
	}
	// The first rows made (lowest ids) have values, every later one NULLs.
	for i := range 40 {
		r := Sparse{UserID: int64(i*7 + 1)}
		if i < 6 {
			n, tag := int32(i*3%5), fmt.Sprintf("t%d", i%3)
			r.N, r.Tag = &n, &tag
		}
		if err := e.db.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
	}
	type read struct {
		name string
		run  func(db *gorm.DB) (any, error)
	}
	pluck := func(dest any, q func(*gorm.DB) *gorm.DB, col string) func(db *gorm.DB) (any, error) {
		return func(db *gorm.DB) (any, error) {
			d := reflect.New(reflect.TypeOf(dest))
			err := q(db.Model(&Sparse{})).Pluck(col, d.Interface()).Error
			return d.Elem().Interface(), err
		}
	}
	reads := []read{
		{"pluck n into []int32 order id limit 4", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("id").Limit(4) }, "n")},
		{"pluck n into []*int32 order tag::text, id limit 3", pluck([]*int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("tag::text").Order("id").Limit(3) }, "n")},
		{"pluck tag into []string order id desc limit 2 offset 37", pluck([]string(nil), func(db *gorm.DB) *gorm.DB { return db.Order("id desc").Limit(2).Offset(37) }, "tag")},
		{"pluck n into []int32 order id limit 7 (a NULL in the page)", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("id").Limit(7) }, "n")},
		{"pluck n into []int32 order n limit 3", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("n").Limit(3) }, "n")},
		{"pluck n into []int32 order n desc limit 2 (NULLs first: in the page)", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("n desc").Limit(2) }, "n")},
		{"pluck n into []int32 where n is null offset 45 (past every row)", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Where("n IS NULL").Offset(45) }, "n")},
		{"pluck n into []int32 order n, id limit 3", pluck([]int32(nil), func(db *gorm.DB) *gorm.DB { return db.Order("n").Order("id").Limit(3) }, "n")},
	}
	for _, batch := range []int{1, 5} {
		e.p.unionBatch = batch
		for _, r := range reads {
			t.Run(fmt.Sprintf("batch %d/%s", batch, r.name), func(t *testing.T) {
				want, werr := r.run(plain)
				got, gerr := r.run(e.db.Clauses(AllShards()))
				if fmt.Sprint(gerr) != fmt.Sprint(werr) {
					t.Fatalf("across %d shards: err=%v; one table: err=%v", e.shards, gerr, werr)
				}
				if werr == nil && !reflect.DeepEqual(got, want) {
					t.Fatalf("across %d shards:\n got %#v\nwant %#v (one table)", e.shards, got, want)
				}
			})
		}
	}
	e.p.unionBatch = 0
}
