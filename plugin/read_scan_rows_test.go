package plugin

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// Row, Rows and Scan across shards serve the rows Find merges: each shape
// read through them equals the same statement on one plain table — the
// columns (names and database types), the rows, their order and the
// driver's values.

// rowsRead is a read across shards, built for Rows, Row and Scan.
type rowsRead struct {
	name string
	q    func(db *gorm.DB) *gorm.DB
}

// rowsReads are the shapes of exactreads_test.go and of plain reads of
// rows (ordered, limited, offset, hidden ORDER BY values, windows), each
// in a total order.
// Reads of every column name them: the plain table has a column the
// shards' tables lack.
var rowsReads = []rowsRead{
	{"every row, ordered", func(db *gorm.DB) *gorm.DB { return photosCols(db).Order("id") }},
	{"ordered, limited, offset", func(db *gorm.DB) *gorm.DB {
		return photosCols(db).Order("likes desc, id").Limit(7).Offset(3)
	}},
	{"selected columns ordered by one not selected", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id", "user_id").Order("caption, id").Limit(7)
	}},
	{"an expression selected and ordered by", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id, likes * 2 AS dbl, caption").Order("user_id % 7 desc, likes * -1, id").Limit(5).Offset(2)
	}},
	{"text ordered in its collation", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id, caption").Order("caption desc, id").Limit(10)
	}},
	{"doubles with NaN, ±Infinity and NULL", func(db *gorm.DB) *gorm.DB {
		return pinsAll(db).Select("id, score, caption").Order("score desc nulls last, caption nulls first, id").Limit(25).Offset(1)
	}},
	{"a window partitioned by the shard key", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("id, user_id, row_number() over (partition by user_id order by likes desc, id) AS rn").Order("id")
	}},
	{"min and max of text", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("min(caption), max(caption) AS hi, count(*)")
	}},
	{"groups ordered, limited", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, min(caption) AS lo, max(caption)").Group("user_id").Order("user_id").Limit(9)
	}},
	{"group by text, ordered by it, paged", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("caption, count(*) AS n, sum(likes)").Group("caption").Order("caption desc").Limit(4).Offset(1)
	}},
	{"distinct text ordered", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Distinct("caption").Order("caption").Limit(5).Offset(1)
	}},
	{"having a count", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, count(*) AS n").Group("user_id").Having("count(*) > ?", 2).Order("user_id")
	}},
	{"having that no group passes", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, count(*)").Group("user_id").Having("count(*) > ?", 1000)
	}},
	{"count distinct", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("count(distinct user_id) AS users, count(DISTINCT caption), count(*) AS n, sum(likes)")
	}},
	{"aggregates of expressions per group", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, sum(likes * 2) AS s, sum(likes::numeric / 4) AS q").Group("user_id").Order("s desc, user_id").Limit(6)
	}},
	{"avg and bool_and", func(db *gorm.DB) *gorm.DB {
		return photosAll(db).Select("user_id, avg(likes) AS a, bool_and(likes > 0) AS b").Group("user_id").Order("user_id")
	}},
	{"sum and avg of double precision", func(db *gorm.DB) *gorm.DB {
		return pinsAll(db).Select("sum(score) AS s, avg(score) AS a, count(score)")
	}},
	{"nothing matches", func(db *gorm.DB) *gorm.DB {
		return photosCols(db).Where("likes > ?", 1000).Order("id")
	}},
}

func photosCols(db *gorm.DB) *gorm.DB {
	return photosAll(db).Select("id, user_id, caption, likes, created_at")
}

// readRows reads everything Rows returns: its columns with their
// database types, then each row's values as the driver gives them.
func readRows(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	var out []string
	var head strings.Builder
	for _, ct := range cts {
		fmt.Fprintf(&head, "%s:%s ", ct.Name(), ct.DatabaseTypeName())
	}
	out = append(out, head.String())
	for rows.Next() {
		vals := make([]any, len(cts))
		ptrs := make([]any, len(cts))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, valuesText(vals))
	}
	return out, rows.Err()
}

// valuesText prints values with their Go types; doubles rounded to 12
// significant digits (the rounding a different order of additions gives).
func valuesText(vals []any) string {
	var b strings.Builder
	for _, v := range vals {
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				fmt.Fprintf(&b, "float64(%v) ", x)
			} else {
				fmt.Fprintf(&b, "float64(%.12g) ", x)
			}
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q) ", x)
		default:
			fmt.Fprintf(&b, "%T(%#v) ", v, v)
		}
	}
	return b.String()
}

// readRow reads what Row returns into one value per column of the
// statement's Rows.
func readRow(db *gorm.DB, q func(db *gorm.DB) *gorm.DB) (string, error) {
	cols, err := readRows(q(db).Rows())
	if err != nil {
		return "", err
	}
	n := len(strings.Fields(cols[0]))
	vals := make([]any, n)
	ptrs := make([]any, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	row := q(db).Row()
	if row == nil {
		return "", errors.New("Row() returned nil")
	}
	if err := row.Scan(ptrs...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "no rows", nil
		}
		return "", err
	}
	return valuesText(vals), nil
}

// readScan reads with Scan into maps and, for a read of the model's
// rows, into the model.
func readScan(db *gorm.DB, q func(db *gorm.DB) *gorm.DB) ([]string, error) {
	var maps []map[string]any
	if err := q(db).Scan(&maps).Error; err != nil {
		return nil, err
	}
	out := typedRows(maps)
	var photos []Photo
	if err := q(db).Scan(&photos).Error; err != nil {
		return nil, err
	}
	out = append(out, photoRows(photos)...)
	var one map[string]any
	tx := q(db).Scan(&one)
	if tx.Error != nil {
		return nil, tx.Error
	}
	return append(out, typedRow(one), fmt.Sprint(tx.RowsAffected)), nil
}

func runRowsReads(t *testing.T, d *diffEnv) {
	for _, c := range rowsReads {
		t.Run(c.name, func(t *testing.T) {
			for _, via := range []struct {
				name string
				read func(db *gorm.DB) (any, error)
			}{
				{"Rows", func(db *gorm.DB) (any, error) { return readRows(c.q(db).Rows()) }},
				{"Row", func(db *gorm.DB) (any, error) { return readRow(db, c.q) }},
				{"Scan", func(db *gorm.DB) (any, error) { return readScan(db, c.q) }},
			} {
				got, err := via.read(d.e.db)
				if err != nil {
					t.Fatalf("%s, plugin: %v", via.name, err)
				}
				want, err := via.read(d.plain)
				if err != nil {
					t.Fatalf("%s, plain: %v", via.name, err)
				}
				if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
					t.Fatalf("%s, plugin:\n%s\nplain GORM:\n%s", via.name, lines(got), lines(want))
				}
			}
		})
	}
}

func lines(v any) string {
	if s, ok := v.([]string); ok {
		return strings.Join(s, "\n")
	}
	return fmt.Sprint(v)
}

// TestRowsAcrossShards reads each shape through Rows, Row and Scan, with
// the caption in byte order.
func TestRowsAcrossShards(t *testing.T) {
	runRowsReads(t, newDiffEnv(t))
}

// TestRowsAcrossShardsCollated: the same with the caption in an ICU
// collation (ordered, min and max finished in Postgres).
func TestRowsAcrossShardsCollated(t *testing.T) {
	runRowsReads(t, newCollatedDiffEnv(t))
}

// TestRowsAcrossShardsRefused: what Find refuses, Rows, Row and Scan
// refuse with the same error.
func TestRowsAcrossShardsRefused(t *testing.T) {
	d := newCollatedDiffEnv(t)
	for _, c := range []struct {
		name, why string
		q         func(db *gorm.DB) *gorm.DB
	}{
		{"string_agg", "string_agg", func(db *gorm.DB) *gorm.DB {
			return photosAll(db).Select("user_id, string_agg(caption, ',')").Group("user_id")
		}},
		{"window over every shard's rows", "PARTITION BY", func(db *gorm.DB) *gorm.DB {
			return photosAll(db).Select("id, row_number() over (order by id) AS rn")
		}},
		{"order by collated text computed by an expression", "expression", func(db *gorm.DB) *gorm.DB {
			return photosAll(db).Order("lower(caption), id").Limit(3)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var maps []map[string]any
			errs := []error{c.q(d.e.db).Find(&maps).Error}
			_, err := c.q(d.e.db).Rows()
			errs = append(errs, err, c.q(d.e.db).Row().Scan(new(any)), c.q(d.e.db).Scan(&maps).Error)
			for i, err := range errs {
				if !errors.Is(err, ErrUnroutableSQL) || !strings.Contains(err.Error(), c.why) {
					t.Fatalf("%s: got %v, want ErrUnroutableSQL saying %q", []string{"Find", "Rows", "Row", "Scan"}[i], err, c.why)
				}
			}
		})
	}
}
