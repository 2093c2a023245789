package plugin

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/memrows"
)

// partialsOf serves rows through database/sql, as a shard's partial rows
// arrive, so that the merge is tested without a server.
func partialsOf(t *testing.T, cols []memrows.Column, data ...[]driver.Value) partials {
	t.Helper()
	rows, err := memrows.Query(context.Background(), &memrows.Rows{Cols: cols, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pt partials
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	pt.cols = columnsOf(cts)
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		pt.rows = append(pt.rows, vals)
	}
	return pt
}

// TestAggregateMergeOrdersAsPostgres groups a float column across two
// units (NaN, -Infinity and NULL groups on both) and orders the groups
// every way an ORDER BY can: one NaN group and one NULL group, each
// where Postgres's sort puts it.
func TestAggregateMergeOrdersAsPostgres(t *testing.T) {
	cols := []memrows.Column{
		{Name: "v", DBType: "FLOAT8", Scan: reflect.TypeFor[float64]()},
		{Name: "count", DBType: "INT8", Scan: reflect.TypeFor[int64]()},
	}
	nan, inf := math.NaN(), math.Inf(-1)
	parts := []partials{
		partialsOf(t, cols, []driver.Value{nan, int64(2)}, []driver.Value{1.5, int64(1)}, []driver.Value{nil, int64(1)}),
		partialsOf(t, cols, []driver.Value{nan, int64(1)}, []driver.Value{inf, int64(3)}, []driver.Value{nil, int64(2)}, []driver.Value{1.5, int64(4)}),
	}
	for _, tc := range []struct {
		name       string
		desc       bool
		nullsFirst bool
		limit      int
		want       string
	}{
		{"asc", false, false, -1, "-Inf:3 1.5:5 NaN:3 NULL:3"},
		{"desc", true, true, -1, "NULL:3 NaN:3 1.5:5 -Inf:3"},
		{"asc nulls first", false, true, -1, "NULL:3 -Inf:3 1.5:5 NaN:3"},
		{"desc nulls last", true, false, -1, "NaN:3 1.5:5 -Inf:3 NULL:3"},
		{"asc limit", false, false, 2, "-Inf:3 1.5:5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ap := &aggPlan{
				items:   []aggItem{{fn: aggNone, col: "v", name: "v", key: 0}, {fn: aggCount, name: "count", part: 0}},
				keys:    []string{"v"},
				grouped: true,
				nparts:  1,
				order:   []aggOrder{{out: 0, key: -1, desc: tc.desc, nullsFirst: tc.nullsFirst}},
				limit:   tc.limit,
			}
			out, err := ap.merge(parts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range out.Data {
				v := "NULL"
				if f, ok := r[0].(float64); ok {
					v = fmt.Sprint(f)
				}
				got = append(got, fmt.Sprintf("%s:%v", v, r[1]))
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("merged groups %s, want %s", g, tc.want)
			}
		})
	}
}
