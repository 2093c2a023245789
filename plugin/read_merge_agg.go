package plugin

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/internal/pgorder"
)

// Combining the partial rows of an aggregate read, and handing the
// combined rows to GORM's own scanning, so that each value reaches the
// destination exactly as a Postgres row's value would.

// numericCol is avg's output column: Postgres's avg of integers and
// numerics is a numeric.
var numericCol = memrows.Column{DBType: "NUMERIC", Scan: reflect.TypeFor[float64]()}

// aggGroup is one group's combined partials.
type aggGroup struct {
	keys []any
	acc  []any // per partial column: int64, pgorder.Decimal or a driver value; nil is NULL
}

// merge combines the units' partial rows into the answer's rows: checks
// that each column combines exactly, groups, finishes each group's
// values, applies DISTINCT, ORDER BY, OFFSET and LIMIT.
func (ap *aggPlan) merge(parts []partials) (*memrows.Rows, error) {
	var cols []memrows.Column
	for _, pt := range parts {
		if pt.cols != nil {
			cols = pt.cols
			break
		}
	}
	nk := len(ap.keys)
	if len(cols) != nk+ap.nparts {
		return nil, fmt.Errorf("shardkit: partial rows have %d columns, want %d", len(cols), nk+ap.nparts)
	}
	kinds := make([]pgorder.Kind, len(cols))
	for i, c := range cols {
		kinds[i] = pgorder.KindOf(c.DBType)
	}
	if err := ap.checkKinds(cols, kinds); err != nil {
		return nil, err
	}
	groups, err := ap.group(parts, kinds)
	if err != nil {
		return nil, err
	}
	out := ap.outColumns(cols)
	okinds := make([]pgorder.Kind, len(out.Cols))
	for i, c := range out.Cols {
		okinds[i] = pgorder.KindOf(c.DBType)
	}
	if out.Data, err = ap.finishRows(groups, out.Cols, okinds); err != nil {
		return nil, err
	}
	if err := ap.sortRows(out.Data, kinds[:nk], okinds); err != nil {
		return nil, err
	}
	if ap.offset > 0 {
		out.Data = out.Data[min(ap.offset, len(out.Data)):]
	}
	if ap.limit >= 0 && len(out.Data) > ap.limit {
		out.Data = out.Data[:ap.limit]
	}
	for i := range out.Data {
		out.Data[i] = out.Data[i][:len(ap.items)] // drop the hidden key columns
	}
	return out, nil
}

// checkKinds refuses the partial columns whose values the plugin cannot
// group, add or compare as Postgres would.
func (ap *aggPlan) checkKinds(cols []memrows.Column, kinds []pgorder.Kind) error {
	nk := len(ap.keys)
	for i := range ap.keys {
		if kinds[i] == pgorder.Other {
			return refuseAgg("column %s (type %s) cannot be grouped or made distinct across shards: the plugin compares integer, numeric, float, text, time, bool and bytea values", ap.keys[i], cols[i].DBType)
		}
	}
	for _, it := range ap.items {
		if it.fn == aggNone {
			continue
		}
		k, name := kinds[nk+it.part], cols[nk+it.part].DBType
		switch it.fn {
		case aggSum, aggAvg:
			if k != pgorder.Int && k != pgorder.Numeric {
				return refuseAgg("%s of %s (type %s) across shards: only sums of integer and numeric columns add up exactly; scope the query to one shard", it.name, it.col, name)
			}
		case aggMin, aggMax:
			if k == pgorder.Text && ap.textColl != "" {
				return refuseAgg("%s of text across shards: the merge compares text as bytes, and %s's text column %s orders otherwise; give it COLLATE \"C\" or scope the query to one shard", it.name, ap.table, ap.textColl)
			}
			if k == pgorder.Other || k == pgorder.Bool {
				return refuseAgg("%s of %s (type %s) cannot be merged across shards; scope the query to one shard", it.name, it.col, name)
			}
		}
	}
	return nil
}

// group combines the partial rows of equal keys, in the order the groups
// first appear (units in plan order).
func (ap *aggPlan) group(parts []partials, kinds []pgorder.Kind) ([]*aggGroup, error) {
	nk := len(ap.keys)
	groups := map[string]*aggGroup{}
	var order []*aggGroup
	var kb []byte
	for _, pt := range parts {
		for _, row := range pt.rows {
			kb = kb[:0]
			for i := 0; i < nk; i++ {
				var ok bool
				if kb, ok = pgorder.AppendKey(kb, pgorder.Of(kinds[i], row[i])); !ok {
					return nil, fmt.Errorf("shardkit: unexpected %T in grouped column %s", row[i], ap.keys[i])
				}
			}
			g, ok := groups[string(kb)]
			if !ok {
				g = ap.newGroup(row[:nk])
				groups[string(kb)] = g
				order = append(order, g)
			}
			if err := ap.combine(g, row[nk:], kinds[nk:]); err != nil {
				return nil, err
			}
		}
	}
	if len(order) == 0 && nk == 0 {
		// an aggregate without GROUP BY answers one row, even over no rows
		order = append(order, ap.newGroup(nil))
	}
	return order, nil
}

func (ap *aggPlan) newGroup(keys []any) *aggGroup {
	g := &aggGroup{keys: keys, acc: make([]any, ap.nparts)}
	for _, it := range ap.items {
		switch it.fn {
		case aggCount:
			g.acc[it.part] = int64(0)
		case aggAvg:
			g.acc[it.part+1] = int64(0)
		}
	}
	return g
}

// outColumns describes the answer's columns as Postgres would: a grouped
// column's and an aggregate's type as the shards reported it, avg's as
// numeric.
func (ap *aggPlan) outColumns(cols []memrows.Column) *memrows.Rows {
	out := &memrows.Rows{}
	nk := len(ap.keys)
	for _, it := range ap.items {
		var c memrows.Column
		switch it.fn {
		case aggNone:
			c = cols[it.key]
		case aggAvg:
			c = numericCol
		default:
			c = cols[nk+it.part]
		}
		c.Name = it.name
		out.Cols = append(out.Cols, c)
	}
	return out
}

// finishRows makes each group's output row, followed by its key columns
// (hidden: an ORDER BY a grouped column not selected reads them), and
// drops repeated rows of a DISTINCT.
func (ap *aggPlan) finishRows(groups []*aggGroup, cols []memrows.Column, okinds []pgorder.Kind) ([][]driver.Value, error) {
	var rows [][]driver.Value
	seen := map[string]bool{}
	var kb []byte
	for _, g := range groups {
		row := make([]driver.Value, len(ap.items), len(ap.items)+len(g.keys))
		for i, it := range ap.items {
			v, err := finish(it, g)
			if err != nil {
				return nil, err
			}
			row[i] = v
		}
		if ap.distinct {
			kb = kb[:0]
			for i, v := range row {
				var ok bool
				if kb, ok = pgorder.AppendKey(kb, pgorder.Of(okinds[i], v)); !ok {
					return nil, refuseAgg("column %s (type %s) cannot be made distinct across shards", ap.items[i].name, cols[i].DBType)
				}
			}
			if seen[string(kb)] {
				continue
			}
			seen[string(kb)] = true
		}
		for _, k := range g.keys {
			row = append(row, k)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// sortRows applies the ORDER BY to the combined rows, with the one
// ordering every merge uses (pgorder.Compare).
func (ap *aggPlan) sortRows(rows [][]driver.Value, keyKinds, okinds []pgorder.Kind) error {
	if len(ap.order) == 0 {
		return nil
	}
	type term struct {
		col  int
		kind pgorder.Kind
		ord  pgorder.Order
	}
	terms := make([]term, len(ap.order))
	for j, o := range ap.order {
		t := term{col: o.out, ord: pgorder.Order{Desc: o.desc, NullsFirst: o.nullsFirst}}
		if o.out >= 0 {
			t.kind = okinds[o.out]
		} else {
			t.col, t.kind = len(ap.items)+o.key, keyKinds[o.key]
		}
		if t.kind == pgorder.Other {
			return refuseAgg("ORDER BY a column of a type the plugin does not compare, across shards")
		}
		if t.kind == pgorder.Text && ap.textColl != "" {
			return refuseAgg("ORDER BY text across shards: the merge compares text as bytes, and %s's text column %s orders otherwise; give it COLLATE \"C\" or scope the query to one shard", ap.table, ap.textColl)
		}
		terms[j] = t
	}
	sort.SliceStable(rows, func(a, b int) bool {
		for _, t := range terms {
			if c := pgorder.Compare(pgorder.Of(t.kind, rows[a][t.col]), pgorder.Of(t.kind, rows[b][t.col]), t.ord); c != 0 {
				return c < 0
			}
		}
		return false
	})
	return nil
}

var errOverflow = errors.New("shardkit: bigint out of range while adding the shards' sums")

// combine adds one partial row into its group.
func (ap *aggPlan) combine(g *aggGroup, row []any, kinds []pgorder.Kind) error {
	for _, it := range ap.items {
		j := it.part
		switch it.fn {
		case aggNone:
		case aggCount:
			n, _ := row[j].(int64)
			g.acc[j] = g.acc[j].(int64) + n
		case aggSum, aggAvg:
			v, err := addVal(kinds[j], g.acc[j], row[j])
			if err != nil {
				return err
			}
			g.acc[j] = v
			if it.fn == aggAvg {
				n, _ := row[j+1].(int64)
				g.acc[j+1] = g.acc[j+1].(int64) + n
			}
		case aggAnd, aggOr:
			v, ok := row[j].(bool)
			if !ok {
				continue // NULL: no rows of the group had a value
			}
			acc, had := g.acc[j].(bool)
			switch {
			case !had:
				g.acc[j] = v
			case it.fn == aggAnd:
				g.acc[j] = acc && v
			default:
				g.acc[j] = acc || v
			}
		case aggMin, aggMax:
			if row[j] == nil {
				continue
			}
			if g.acc[j] == nil {
				g.acc[j] = row[j]
				continue
			}
			c := pgorder.Compare(pgorder.Of(kinds[j], row[j]), pgorder.Of(kinds[j], g.acc[j]), pgorder.Order{})
			if it.fn == aggMin && c < 0 || it.fn == aggMax && c > 0 {
				g.acc[j] = row[j]
			}
		}
	}
	return nil
}

// addVal adds a partial sum (int64 for a bigint sum, a numeric's text)
// to an accumulated one; NULL adds nothing.
func addVal(k pgorder.Kind, acc, v any) (any, error) {
	if v == nil {
		return acc, nil
	}
	if k == pgorder.Int {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("shardkit: unexpected %T in an integer sum", v)
		}
		if acc == nil {
			return n, nil
		}
		a := acc.(int64)
		if (n > 0 && a > math.MaxInt64-n) || (n < 0 && a < math.MinInt64-n) {
			return nil, errOverflow
		}
		return a + n, nil
	}
	d, err := pgorder.ParseDecimal(v)
	if errors.Is(err, pgorder.ErrNotFinite) {
		return nil, refuseAgg("numeric value %v (NaN or infinity) cannot be summed across shards; scope the query to one shard", v)
	}
	if err != nil {
		return nil, err
	}
	if acc == nil {
		return d, nil
	}
	return acc.(pgorder.Decimal).Add(d), nil
}

// finish is an item's value for a group, as the driver would return it.
func finish(it aggItem, g *aggGroup) (driver.Value, error) {
	switch it.fn {
	case aggNone:
		return g.keys[it.key], nil
	case aggSum:
		if d, ok := g.acc[it.part].(pgorder.Decimal); ok {
			return d.String(), nil
		}
		return g.acc[it.part], nil
	case aggAvg:
		s, n := g.acc[it.part], g.acc[it.part+1].(int64)
		if s == nil || n == 0 {
			return nil, nil
		}
		var d pgorder.Decimal
		switch v := s.(type) {
		case int64:
			d = pgorder.DecimalOf(v)
		case pgorder.Decimal:
			d = v
		}
		return d.Div(pgorder.DecimalOf(n)).String(), nil
	}
	return g.acc[it.part], nil
}

// scanMerged hands combined rows to GORM's scanning, into the
// statement's destination.
func (p *Plugin) scanMerged(db *gorm.DB, r *memrows.Rows) {
	rows, err := memrows.Query(context.Background(), r)
	if err != nil {
		db.AddError(err)
		return
	}
	defer func() { db.AddError(rows.Close()) }()
	gorm.Scan(rows, db, 0)
}
