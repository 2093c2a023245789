package plugin

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// Reads across shards that Go alone cannot merge exactly — HAVING,
// count(DISTINCT …), aggregates of expressions, floating-point sums,
// text in a linguistic collation — each compared with plain GORM on one
// table of the same rows and collation (the differential test's two
// sides), values with their Go types.

// newCollatedDiffEnv is the differential test's environment with the
// photos' caption in an ICU collation on both sides.
func newCollatedDiffEnv(t testing.TB) *diffEnv {
	d := newDiffEnvWith(t, func(o *envOpts) {
		pins := o.before
		o.before = func(e *env) {
			pins(e)
			icuCaptions(t, e, e.servers...)
		}
	})
	pgtest.Exec(t, d.plainDSN, `ALTER TABLE photos ALTER COLUMN caption TYPE text COLLATE "und-x-icu"`)
	d.conns = nil // their prepared reads of the plain table predate the change
	return d
}

// exactRead is a read across shards compared with one table.
type exactRead struct {
	name string
	run  func(db *gorm.DB) (any, error)
}

func photosAll(db *gorm.DB) *gorm.DB { return db.Clauses(AllShards()).Model(&Photo{}) }
func pinsAll(db *gorm.DB) *gorm.DB   { return db.Clauses(AllShards()).Model(&Pin{}) }

func intoMaps(q func(db *gorm.DB) *gorm.DB) func(db *gorm.DB) (any, error) {
	return func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := q(db).Find(&rows).Error
		return rows, err
	}
}

// exactReads are the shapes, on photos (caption collated in the
// collated run) and pins (score: NaN, ±Infinity, NULL).
var exactReads = []exactRead{
	{"min and max of text", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("min(caption), max(caption) AS hi, count(*)")
	})},
	{"min and max of text per group", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, min(caption) AS lo, max(caption)").Group("user_id").Order("user_id").Limit(9)
	})},
	{"group by text, ordered by it, paged", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("caption, count(*) AS n, sum(likes)").Group("caption").Order("caption desc").Limit(4).Offset(1)
	})},
	{"groups ordered by min of text", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, min(caption) AS m").Group("user_id").Order("m, user_id desc")
	})},
	{"distinct text ordered", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Distinct("caption").Order("caption").Limit(5).Offset(1)
	})},
	{"having a count", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, count(*) AS n").Group("user_id").Having("count(*) > ?", 2).Order("user_id")
	})},
	{"having aggregates not selected, and a grouped column", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, caption").Group("user_id, caption").
			Having("sum(likes) >= ? AND max(likes) - min(likes) < ? OR caption = ?", 2, 6, "cat").Order("user_id, caption")
	})},
	{"having on text in its collation", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("likes, count(*) AS n").Group("likes").Having("min(caption) < ?", "b").Order("likes")
	})},
	{"having without group by", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("count(*) AS n, avg(likes)").Having("count(*) > ?", 0)
	})},
	{"having that no group passes", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, count(*)").Group("user_id").Having("count(*) > ?", 1000)
	})},
	{"two havings", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("caption, avg(likes) AS a").Group("caption").Having("count(*) > ?", 1).Having("avg(likes) > ?", 1.5).Order("caption")
	})},
	{"groups ordered by aggregates not selected", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("caption").Group("caption").Order("count(distinct user_id) desc, max(likes), caption").Limit(5)
	})},
	{"count distinct", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("count(distinct user_id) AS users, count(DISTINCT caption), count(*) AS n, sum(likes)")
	})},
	{"count distinct per group", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("caption, count(distinct user_id) AS users, count(distinct likes) AS l, max(likes)").Group("caption").Order("users desc, caption")
	})},
	{"count distinct of an expression, where nothing matches", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Where("likes > ?", 1000).Select("count(distinct likes % 3)")
	})},
	{"Distinct(col).Count", func(db *gorm.DB) (any, error) {
		var n int64
		err := photosAll(db).Distinct("user_id").Count(&n).Error
		return n, err
	}},
	{"Select(count distinct) into an int", func(db *gorm.DB) (any, error) {
		var n int64
		err := photosAll(db).Select("count(distinct user_id)").Find(&n).Error
		return n, err
	}},
	{"aggregates of expressions", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("sum(likes * 2) AS s, avg(likes + 1), max(likes - 1) AS m, min(length(caption)) AS shortest, count(nullif(likes, 0)) AS c")
	})},
	{"aggregates of expressions per group, ordered by one", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, sum(likes * 2) AS s, sum(likes::numeric / 4) AS q").Group("user_id").Order("s desc, user_id").Limit(6)
	})},
	{"bool_and and bool_or", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, bool_and(likes > 0) AS a, bool_or(likes > 4) AS o, every(likes < 8)").Group("user_id").Order("user_id")
	})},
	{"sum and avg of double precision", intoMaps(func(db *gorm.DB) *gorm.DB {
		return pinsAll(db).Select("sum(score) AS s, avg(score) AS a, count(score)")
	})},
	{"sum and avg of finite doubles per group", intoMaps(func(db *gorm.DB) *gorm.DB {
		return pinsAll(db).Where("score > ? AND score < ?", -100, 100).Select("user_id, sum(score) AS s, avg(score) AS a").Group("user_id").Order("user_id")
	})},
	{"doubles with a having", intoMaps(func(db *gorm.DB) *gorm.DB {
		return pinsAll(db).Select("likes, sum(score) AS s").Group("likes").Having("sum(score) > ?", 0).Order("likes")
	})},
	{"sum of a double expression", intoMaps(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("sum(likes::float8 / 3) AS s, avg(likes::float8)")
	})},
}

// photosOut reads photos into []Photo, canonical.
func photosOut(q func(db *gorm.DB) *gorm.DB) func(db *gorm.DB) (any, error) {
	return func(db *gorm.DB) (any, error) {
		var rows []Photo
		err := q(db).Find(&rows).Error
		return strings.Join(photoRows(rows), "\n"), err
	}
}

// orderedReads order rows by what they do not carry: columns not
// selected or not in the destination, expressions, text into maps.
var orderedReads = []exactRead{
	{"into a smaller struct, ordered by a column it lacks", func(db *gorm.DB) (any, error) {
		var rows []photoKey
		err := photosAll(db).Order("likes desc, id").Limit(9).Offset(2).Find(&rows).Error
		return fmtAll(rows, "%+v"), err
	}},
	{"a column not selected", photosOut(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id", "user_id").Order("caption, id").Limit(7)
	})},
	{"a column not selected, descending, every row", photosOut(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id", "likes").Order("caption desc").Order("id")
	})},
	{"an expression", photosOut(func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Order("user_id % 7 desc, likes * -1, id").Limit(5).Offset(2)
	})},
	{"plucked, ordered by another column", func(db *gorm.DB) (any, error) {
		var ids []int64
		err := photosAll(db).Order("likes, id desc").Limit(12).Pluck("id", &ids)
		return ids, err.Error
	}},
	{"maps ordered by text and an expression", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := photosAll(db).Select("id, caption").Order("caption desc, likes % 3, id").Limit(10).Find(&rows).Error
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = typedRow(r)
		}
		return out, err
	}},
	{"First with its primary key not selected", func(db *gorm.DB) (any, error) {
		var p Photo
		err := photosAll(db).Select("caption", "likes").Where("likes > ?", 2).First(&p).Error
		return photoRows([]Photo{p}), err
	}},
	{"NULLS FIRST and LAST, doubles and text", func(db *gorm.DB) (any, error) {
		var ids []int64
		err := pinsAll(db).Order("score desc nulls last, caption nulls first, id").Limit(25).Offset(1).Pluck("id", &ids)
		return ids, err.Error
	}},
	{"NULLS FIRST ascending, every row", func(db *gorm.DB) (any, error) {
		var ids []int64
		err := pinsAll(db).Order("score NULLS FIRST, id desc").Pluck("id", &ids)
		return ids, err.Error
	}},
	{"doubles with NaN, ±Infinity and NULL by an expression", func(db *gorm.DB) (any, error) {
		var ids []int64
		err := pinsAll(db).Order("score * 2 desc, id").Limit(15).Pluck("id", &ids)
		return ids, err.Error
	}},
}

// windowReads are windows partitioned by the shard key (or the primary
// key), computed per shard.
var windowReads = []exactRead{
	{"row_number partitioned by the shard key", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := photosAll(db).Select("id, user_id, row_number() over (partition by user_id order by likes desc, id) AS rn").Order("id").Find(&rows).Error
		return typedRows(rows), err
	}},
	{"a sum over the user's rows, paged", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := photosAll(db).Select("id", "likes", "sum(likes) OVER (PARTITION BY photos.user_id) AS total").Where("likes > ?", 1).Order("likes desc, id").Limit(9).Offset(3).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"lag partitioned by the key and another column", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := photosAll(db).Select("id, lag(likes) over (partition by caption, user_id order by id) AS prev").Order("id desc").Find(&rows).Error
		return typedRows(rows), err
	}},
}

func typedRows(rows []map[string]any) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = typedRow(r)
	}
	return out
}

func runExactReads(t *testing.T, d *diffEnv) {
	for _, c := range slices.Concat(exactReads, orderedReads, windowReads) {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.run(d.e.db)
			if err != nil {
				t.Fatalf("plugin: %v", err)
			}
			want, err := c.run(d.plain)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			if !sameAnswer(got, want) {
				t.Fatalf("plugin:\n%s\nplain GORM:\n%s", typed(got), typed(want))
			}
		})
	}
}

// TestExactReads runs the shapes with the caption in byte order (the
// test clusters' locale is C).
func TestExactReads(t *testing.T) {
	runExactReads(t, newDiffEnv(t))
}

// TestExactReadsCollated runs them with the caption in an ICU collation.
func TestExactReadsCollated(t *testing.T) {
	runExactReads(t, newCollatedDiffEnv(t))
}

// TestExactReadRefusals: the shapes that have no exact merge are refused
// with ErrUnroutableSQL, saying why.
func TestExactReadRefusals(t *testing.T) {
	d := newCollatedDiffEnv(t)
	for _, c := range []struct {
		name, why string
		run       func(db *gorm.DB) error
	}{
		{"string_agg", "string_agg", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("user_id, string_agg(caption, ',')").Group("user_id").Find(&rows).Error
		}},
		{"sum(distinct)", "DISTINCT", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("sum(distinct likes)").Find(&rows).Error
		}},
		{"nested aggregate", "inside an aggregate", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("sum(stddev(likes))").Find(&rows).Error
		}},
		{"having a function that is not merged", "calls", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("user_id").Group("user_id").Having("stddev(likes) > ?", 1).Find(&rows).Error
		}},
		{"having an ungrouped column", "not a grouped column", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("user_id").Group("user_id").Having("likes > ?", 1).Find(&rows).Error
		}},
		{"having a sub-query", "sub-queries", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("user_id").Group("user_id").Having("count(*) > (select 1)").Find(&rows).Error
		}},
		{"order by collated text computed by an expression", "expression", func(db *gorm.DB) error {
			var rows []Photo
			return photosAll(db).Order("lower(caption), id").Limit(3).Find(&rows).Error
		}},
		{"sum of real", "real", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("avg(likes::real)").Find(&rows).Error
		}},
		{"order by a COLLATE", "COLLATE", func(db *gorm.DB) error {
			var rows []photoKey
			return photosAll(db).Order(`caption COLLATE "C", id`).Find(&rows).Error
		}},
		{"window over every shard's rows", "PARTITION BY", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("id, row_number() over (order by id) AS rn").Find(&rows).Error
		}},
		{"window partitioned by another column", "shard key", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("id, rank() over (partition by likes order by id) AS r").Find(&rows).Error
		}},
		{"a function of the row in a read of rows", "other than a window", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("id, row_number() over (partition by user_id), lower(caption) AS c").Find(&rows).Error
		}},
		{"min of collated text computed by an expression", "expression", func(db *gorm.DB) error {
			var rows []map[string]any
			return photosAll(db).Select("min(lower(caption))").Find(&rows).Error
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.run(d.e.db)
			if !errors.Is(err, ErrUnroutableSQL) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("got %v, want ErrUnroutableSQL saying %q", err, c.why)
			}
		})
	}
}

// sameAnswer compares two answers value by value, with their Go types;
// doubles are equal within a relative 1e-12 (the rounding a different
// order of additions gives), NaN equal to NaN.
func sameAnswer(a, b any) bool {
	switch x := a.(type) {
	case []map[string]any:
		y, ok := b.([]map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameAnswer(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameAnswer(v, w) {
				return false
			}
		}
		return true
	case float64:
		y, ok := b.(float64)
		return ok && closeFloat(x, y)
	}
	return typed(a) == typed(b)
}

// closeFloat reports doubles equal within a relative 1e-12.
func closeFloat(x, y float64) bool {
	switch {
	case math.IsNaN(x) || math.IsNaN(y):
		return math.IsNaN(x) && math.IsNaN(y)
	case math.IsInf(x, 0) || math.IsInf(y, 0):
		return x == y
	}
	return math.Abs(x-y) <= 1e-12*math.Max(math.Abs(x), math.Abs(y))
}
