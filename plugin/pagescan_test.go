package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// Reads across shards, with a LIMIT or an OFFSET, ordered by a value the
// rows carry, into a destination that cannot hold some value outside the
// page (a bigint beyond int32): one table never returns those rows, so
// plain GORM scans none of them, and neither may the merge.

// Meter is a model whose N is a bigint read into an int32 where it fits.
type Meter struct {
	ID     int64
	UserID int64 `shard:"key"`
	N      int64
	Price  string // numeric
}

// meterSmall is a destination whose N cannot hold the largest values.
type meterSmall struct {
	ID    int64
	Price string
	N     int32
}

const metersDDL = "CREATE TABLE meters (id bigint PRIMARY KEY, user_id bigint NOT NULL, n bigint NOT NULL, price numeric NOT NULL);\n"

// newMetersEnv is a plugin on two servers of 8 shards holding the
// meters, one statement per shard (so that every shard's rows up to the
// page's end come back, the largest among them), and plain GORM on one
// table of the same rows. The two largest n, beyond int32, have the
// highest prices.
func newMetersEnv(t *testing.T) (*env, *gorm.DB) {
	t.Helper()
	ctx := context.Background()
	e := newEnv(t, envOpts{shards: 8, models: []any{&Meter{}}, before: func(e *env) {
		for _, srv := range e.servers {
			conn := pgtest.Connect(t, e.dsn[srv])
			rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'photos' ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, s := range schemas {
				b.WriteString("SET search_path = " + pgx.Identifier{s}.Sanitize() + ";\n" + metersDDL)
			}
			b.WriteString("RESET search_path;\n")
			pgtest.Exec(t, e.dsn[srv], b.String())
		}
	}})
	p, _ := shardkitOf(e.db)
	p.unionBatch = 1
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, metersDDL)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := plain.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	const insert = "INSERT INTO %s (id, user_id, n, price) VALUES ($1, $2, $3, $4)"
	pc := pgtest.Connect(t, plainDSN)
	for i := range 16 {
		user := int64(1000 + 37*i)
		n, price := int64(i*3%16), fmt.Sprintf("%d.5", i)
		if i >= 14 {
			n = int64(i) * 1_000_000_000
		}
		shard := e.shardOf(user)
		conn := pgtest.Connect(t, e.dsn[e.serverOf(t, shard)])
		if _, err := conn.Exec(ctx, fmt.Sprintf(insert, pgx.Identifier{router.SchemaName(shard), "meters"}.Sanitize()), int64(5000+i), user, n, price); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Exec(ctx, fmt.Sprintf(insert, "meters"), int64(5000+i), user, n, price); err != nil {
			t.Fatal(err)
		}
	}
	return e, plain
}

// TestPageScanOnly: such reads (Pluck, Find, Scan, First) scan only the
// page, as plain GORM does, whatever the rows outside it hold.
func TestPageScanOnly(t *testing.T) {
	e, plain := newMetersEnv(t)
	all := func(db *gorm.DB) *gorm.DB {
		if db == plain {
			return db.Model(&Meter{})
		}
		return db.Clauses(AllShards()).Model(&Meter{})
	}
	for _, c := range []struct {
		name string
		read func(db *gorm.DB) (any, error)
	}{
		{"Pluck into []int32, limited", func(db *gorm.DB) (any, error) {
			var out []int32
			err := all(db).Order("n").Limit(3).Pluck("n", &out).Error
			return out, err
		}},
		{"Pluck into []int32, offset", func(db *gorm.DB) (any, error) {
			var out []int32
			err := all(db).Order("n desc").Offset(2).Pluck("n", &out).Error
			return out, err
		}},
		{"Pluck into []int32, offset and limit", func(db *gorm.DB) (any, error) {
			var out []int32
			err := all(db).Order("n desc").Offset(2).Limit(4).Pluck("n", &out).Error
			return out, err
		}},
		{"Find ordered by numeric text, limited", func(db *gorm.DB) (any, error) {
			var out []meterSmall
			err := all(db).Order("price").Limit(3).Find(&out).Error
			return out, err
		}},
		{"Find ordered by numeric text, offset", func(db *gorm.DB) (any, error) {
			var out []meterSmall
			err := all(db).Order("price desc").Offset(2).Find(&out).Error
			return out, err
		}},
		{"Scan into structs, limited", func(db *gorm.DB) (any, error) {
			var out []meterSmall
			err := all(db).Select("id, price, n").Order("price").Limit(3).Scan(&out).Error
			return out, err
		}},
		{"Scan into maps, limited", func(db *gorm.DB) (any, error) {
			var out []map[string]any
			err := all(db).Select("id, n").Order("n").Limit(3).Scan(&out).Error
			return typedRows(out), err
		}},
		{"First past an offset", func(db *gorm.DB) (any, error) {
			var out meterSmall
			err := all(db).Order("price desc").Offset(2).First(&out).Error
			return out, err
		}},
		{"Last ordered by numeric text", func(db *gorm.DB) (any, error) {
			var out meterSmall
			err := all(db).Order("price").Offset(2).Last(&out).Error
			return out, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.read(plain)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			got, err := c.read(e.db)
			if err != nil {
				t.Fatalf("plugin: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("plugin: %v\nplain GORM: %v", got, want)
			}
		})
	}
}
