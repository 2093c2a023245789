package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/pgorder"
)

// Aggregates, GROUP BY and DISTINCT across shards, each compared with
// plain GORM on one unsharded table holding the same rows (the
// differential test's two sides). Values are compared with their Go
// types, so that a numeric that plain GORM returns as a string, or a
// bigint as an int64, must come back the same from the shards.

type likeStats struct {
	UserID  int64
	N       int64
	Total   int64
	Lo, Hi  int
	Avg     float64
	AvgText string
	Latest  time.Time
}

func TestAggregatesAcrossShards(t *testing.T) {
	d := newDiffEnv(t)
	all := func(db *gorm.DB) *gorm.DB { return db.Clauses(AllShards()).Model(&Photo{}) }
	some := func(db *gorm.DB) *gorm.DB {
		return db.Model(&Photo{}).Where("user_id IN ?", []int64{d.data.users[0], d.data.users[3], d.data.users[7], d.data.users[34], d.data.absent[0]})
	}
	cases := []struct {
		name string
		run  func(db *gorm.DB) (any, error)
	}{
		{"count sum min max avg into a map", func(db *gorm.DB) (any, error) {
			var m map[string]any
			err := all(db).Select("count(*), sum(likes), min(likes), max(created_at), avg(likes)").Take(&m).Error
			return m, err
		}},
		{"take aggregates into a struct", func(db *gorm.DB) (any, error) {
			var row likeStats
			err := all(db).Select("count(*) AS n, sum(likes) AS total, min(likes) lo, max(likes) AS hi, avg(likes) AS avg, avg(likes) AS avg_text, max(created_at) AS latest").Take(&row).Error
			return row, err
		}},
		{"sum of bigint is numeric", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("sum(user_id) AS s, avg(user_id) AS a, sum(likes) AS l").Find(&rows).Error
			return rows, err
		}},
		{"aggregates over no rows", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Where("likes > ?", 1000).Select("count(id), sum(likes), avg(likes), min(caption)").Find(&rows).Error
			return rows, err
		}},
		{"group by into structs, ordered by an aggregate, paged", func(db *gorm.DB) (any, error) {
			var rows []likeStats
			err := all(db).Select("user_id, count(*) AS n, sum(likes) AS total, min(likes) AS lo, max(likes) AS hi, avg(likes) AS avg, avg(likes) AS avg_text, max(created_at) AS latest").
				Group("user_id").Order("total desc, user_id").Limit(7).Offset(3).Find(&rows).Error
			return rows, err
		}},
		{"group by two columns, order by position and a hidden key", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := some(db).Select("caption, count(*)").Group("user_id, caption").Order("2 desc, user_id, caption").Find(&rows).Error
			return rows, err
		}},
		{"distinct columns with limit and offset", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Distinct("caption", "likes").Order("likes desc, caption").Limit(4).Offset(2).Find(&rows).Error
			return rows, err
		}},
		{"distinct pluck", func(db *gorm.DB) (any, error) {
			var caps []string
			err := all(db).Distinct().Order("caption").Pluck("caption", &caps).Error
			return caps, err
		}},
		{"pluck an aggregate per group", func(db *gorm.DB) (any, error) {
			var ns []int64
			err := all(db).Group("user_id").Order("user_id desc").Pluck("count(*)", &ns).Error
			return ns, err
		}},
		{"count of groups", func(db *gorm.DB) (any, error) {
			var n int64
			err := all(db).Group("caption").Count(&n).Error
			return n, err
		}},
		{"count of a column adds up", func(db *gorm.DB) (any, error) {
			var n int64
			err := all(db).Select("caption").Count(&n).Error
			return n, err
		}},
		{"find one aggregate into an int64", func(db *gorm.DB) (any, error) {
			var n int64
			err := some(db).Select("sum(likes)").Find(&n).Error
			return n, err
		}},
		{"order by an aggregate expression, nulls first", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("likes, count(*), max(caption)").Group("likes").Order("count(*) desc, likes nulls first").Find(&rows).Error
			return rows, err
		}},
		{"a string literal: one statement per shard", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Where("caption <> 'sunset'").Select("caption, sum(likes) total, avg(id)").Group("caption").Order("caption desc").Find(&rows).Error
			return rows, err
		}},
		{"grouped rows into the model", func(db *gorm.DB) (any, error) {
			var rows []Photo
			err := all(db).Select("user_id, max(likes) AS likes").Group("user_id").Order("likes desc, user_id").Limit(5).Find(&rows).Error
			return rows, err
		}},
		{"first of groups by id", func(db *gorm.DB) (any, error) {
			var row map[string]any
			err := all(db).Select("id, count(*) AS n, max(caption)").Group("id").First(&row).Error
			return row, err
		}},
		{"last of distinct ids", func(db *gorm.DB) (any, error) {
			var row Photo
			err := all(db).Distinct("id", "user_id").Last(&row).Error
			return row, err
		}},
		{"distinct over grouped rows", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Distinct("count(*) AS n").Group("user_id").Order("n").Find(&rows).Error
			return rows, err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := c.run(d.e.db.WithContext(ctx))
			if err != nil {
				t.Fatalf("plugin: %v", err)
			}
			want, err := c.run(d.plain.WithContext(ctx))
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			if g, w := typed(got), typed(want); g != w {
				t.Fatalf("plugin:\n%s\nplain GORM:\n%s", g, w)
			}
		})
	}

	// Shapes once refused, now finished in Postgres (read_merge_agg_final.go) or
	// combined from partials of expressions.
	for _, c := range []struct {
		name string
		run  func(db *gorm.DB) (any, error)
	}{
		{"having", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("user_id, count(*) AS n").Group("user_id").Having("count(*) > ?", 1).Order("user_id").Find(&rows).Error
			return rows, err
		}},
		{"count distinct", func(db *gorm.DB) (any, error) {
			var n int64
			err := all(db).Distinct("user_id").Count(&n).Error
			return n, err
		}},
		{"count(distinct) in the select list", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("count(distinct user_id)").Find(&rows).Error
			return rows, err
		}},
		{"aggregate of an expression", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("sum(likes * 2)").Find(&rows).Error
			return rows, err
		}},
		{"order by an aggregate not selected", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("user_id").Group("user_id").Order("sum(likes) desc, user_id").Limit(8).Find(&rows).Error
			return rows, err
		}},
		{"sum of an expression cast", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := all(db).Select("sum(likes::float8)").Find(&rows).Error
			return rows, err
		}},
	} {
		t.Run("once refused/"+c.name, func(t *testing.T) {
			got, err := c.run(d.e.db)
			if err != nil {
				t.Fatalf("plugin: %v", err)
			}
			want, err := c.run(d.plain)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			if g, w := typed(got), typed(want); g != w {
				t.Fatalf("plugin:\n%s\nplain GORM:\n%s", g, w)
			}
		})
	}

	refused := []struct {
		name string
		run  func(db *gorm.DB) error
	}{
		{"window function", func(db *gorm.DB) error {
			var rows []map[string]any
			return all(db).Select("id, count(*) OVER ()").Find(&rows).Error
		}},
		{"string_agg", func(db *gorm.DB) error {
			var rows []map[string]any
			return all(db).Select("user_id, string_agg(caption, ',')").Group("user_id").Find(&rows).Error
		}},
		{"ungrouped column", func(db *gorm.DB) error {
			var rows []map[string]any
			return all(db).Select("user_id, caption, count(*)").Group("user_id").Find(&rows).Error
		}},
		{"group by without a select list", func(db *gorm.DB) error {
			var rows []Photo
			return all(db).Group("id").Find(&rows).Error
		}},
		{"first of an aggregate (Postgres refuses the ORDER BY id too)", func(db *gorm.DB) error {
			var row map[string]any
			return all(db).Select("sum(likes)").First(&row).Error
		}},
	}
	for _, c := range refused {
		t.Run("refused/"+c.name, func(t *testing.T) {
			err := c.run(d.e.db)
			if !errors.Is(err, ErrUnroutableSQL) {
				t.Fatalf("got %v, want ErrUnroutableSQL", err)
			}
			t.Log(err)
		})
	}
}

// typed prints a value with the Go type of every value held in an
// interface (a map's values), so that int64 and float64 differ.
func typed(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%T(%#v) ", k, x[k], x[k])
		}
		return "{" + b.String() + "}"
	case []map[string]any:
		out := make([]string, len(x))
		for i, m := range x {
			out[i] = typed(m)
		}
		return strings.Join(out, "\n")
	}
	return fmt.Sprintf("%T %#v", v, v)
}

// TestNumericDivision checks the plugin's numeric division (avg's last
// step) against Postgres's own, and the numeric text round trip.
func TestNumericDivision(t *testing.T) {
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 0))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	nums := []string{"0", "5", "-5", "4", "123456789", "1", "99999", "10000", "9999.5", "0.0001", "-0.00125", "123456789012345678901234567890", "7.10"}
	for i := 0; i < 300; i++ {
		nums = append(nums, strconv.FormatInt(rng.Int64N(1<<40)-1<<39, 10))
	}
	dens := []int64{1, 2, 3, 7, 9999, 10000, 10001, 30000, 123456789}
	for i, a := range nums {
		b := dens[i%len(dens)]
		if i < 13 {
			for _, b := range dens {
				checkDiv(t, ctx, conn, a, b)
			}
			continue
		}
		checkDiv(t, ctx, conn, a, b)
	}
}

func checkDiv(t *testing.T, ctx context.Context, conn *pgx.Conn, a string, b int64) {
	t.Helper()
	var want string
	if err := conn.QueryRow(ctx, "SELECT ($1::numeric / $2::bigint::numeric)::text", a, b).Scan(&want); err != nil {
		t.Fatal(err)
	}
	d, err := pgorder.ParseDecimal(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Div(pgorder.DecimalOf(b)).String(); got != want {
		t.Errorf("%s / %d = %s, Postgres says %s", a, b, got, want)
	}
}
