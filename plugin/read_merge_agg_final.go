package plugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/internal/pgorder"
	"github.com/shardkit/shardkit/internal/sqlcond"
)

// Finishing an aggregate read in Postgres. Go combines the shards'
// partial groups exactly where it can (read_merge_agg.go). Where it cannot —
// HAVING (a predicate only Postgres evaluates as written), count(DISTINCT
// …) (the per-shard distinct values, combined), sums and averages of
// floating-point values (Postgres's arithmetic, overflow checks and all),
// min, max and ORDER BY of text in a collation that is not byte order —
// the partial rows of every unit go to one server of the read in one
// statement, as one array per partial column typed from the columns the
// shards returned, and that statement groups, finishes each aggregate,
// filters by HAVING, orders and limits. Its rows are the answer, scanned
// by GORM as the rows of one table. One more round trip, exact by
// construction.

// maxFinishedInPostgres is the most partial rows an aggregate read sends
// to be finished in Postgres (with count(DISTINCT …), one per group and
// distinct value per shard): past it the read is refused (ErrUnroutableSQL),
// so that a read's memory stays bounded (about 100 bytes a row).
const maxFinishedInPostgres = 1 << 20

// finishReason says why an aggregate read's partial groups are finished
// in Postgres ("" when Go combines them exactly). kinds are those of the
// partial columns; textColl is aggPlan.textColl.
func (ap *aggPlan) finishReason(kinds []pgorder.Kind) string {
	nk := len(ap.keys) + len(ap.dkeys)
	if len(kinds) != nk+ap.nparts {
		return "" // the merge reports it
	}
	textOut := func(i int) bool {
		it := ap.items[i]
		switch it.fn {
		case aggNone:
			return kinds[it.key] == pgorder.Text
		case aggMin, aggMax:
			return kinds[nk+it.part] == pgorder.Text
		}
		return false
	}
	switch {
	case len(ap.having) > 0:
		return "HAVING"
	case len(ap.dkeys) > 0:
		return "count(DISTINCT …)"
	}
	for _, it := range ap.items {
		if it.hidden {
			return "ORDER BY an aggregate not selected"
		}
	}
	for i := range len(ap.keys) {
		if ap.nondet && kinds[i] == pgorder.Text {
			return "GROUP BY or DISTINCT text in a nondeterministic collation"
		}
	}
	for i, it := range ap.items {
		switch {
		case (it.fn == aggSum || it.fn == aggAvg) && kinds[nk+it.part] == pgorder.Float:
			return "a floating-point " + it.name
		case ap.textColl != "" && textOut(i) && it.fn != aggNone:
			return "min or max of text in a linguistic collation"
		}
	}
	for _, o := range ap.order {
		if ap.textColl == "" {
			break
		}
		if o.out >= 0 && textOut(o.out) || o.out < 0 && kinds[o.key] == pgorder.Text {
			return "ORDER BY text in a linguistic collation"
		}
	}
	return ""
}

// finishInPostgres finishes the partial groups of every unit on one
// server of the read (see onOneServer) and returns the answer's rows.
func (p *Plugin) finishInPostgres(ctx context.Context, rp *readPlan, parts []partials, served []string) (*memrows.Rows, error) {
	ap := rp.agg
	var cols []memrows.Column
	var rows [][]any
	for _, pt := range parts {
		if cols == nil {
			cols = pt.cols
		}
		rows = append(rows, pt.rows...)
	}
	if len(rows) > maxFinishedInPostgres {
		return nil, refuseAgg("finishing %d partial groups of several shards (%s) in Postgres: at most %d are sent at once; narrow the read with conditions, or scope it to fewer shards",
			len(rows), ap.finishReason(ap.kinds(cols)), maxFinishedInPostgres)
	}
	colls, err := ap.collations(ctx, rp.d.m, cols)
	if err != nil {
		return nil, err
	}
	text, args, err := ap.finishStatement(cols, rows, colls)
	if err != nil {
		return nil, err
	}
	var out partials
	err = p.onOneServer(ctx, rp, served, "finish the merged groups", func(ctx context.Context, srv *serverDB) error {
		var err error
		out, err = readAll(ctx, srv, text, args)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out.memRows(), nil
}

func (ap *aggPlan) kinds(cols []memrows.Column) []pgorder.Kind {
	kinds := make([]pgorder.Kind, len(cols))
	for i, c := range cols {
		kinds[i] = pgorder.KindOf(c.DBType)
	}
	return kinds
}

// collations returns the collation each text column of the partial rows
// compares in (nil: byte order, or not text): a column's own; an
// expression's only where every text column of the table is in byte
// order, since the plugin does not know which collation Postgres derives
// for it.
func (ap *aggPlan) collations(ctx context.Context, m *model, cols []memrows.Column) ([]*collation, error) {
	out := make([]*collation, len(cols))
	kinds := ap.kinds(cols)
	of := func(i int, col, expr string) error {
		if kinds[i] != pgorder.Text {
			return nil
		}
		if col == "" {
			if ap.textColl != "" {
				return refuseAgg("%s across shards: text computed by an expression cannot be compared in its collation (%s has text in %s); compare a column, or scope the query to one shard", expr, m.table, ap.textColl)
			}
			return nil
		}
		c, err := m.textOrder(ctx, col)
		if c == nil && collatable(cols[i].DBType) {
			// byte order: said so, since the statement finishing the
			// groups would compare in the database's default
			c = &byteCollation
		}
		out[i] = c
		return err
	}
	for i, k := range ap.keys {
		if err := of(i, k, ""); err != nil {
			return nil, err
		}
	}
	nk := len(ap.keys)
	for _, it := range ap.items {
		var err error
		switch {
		case it.distinct:
			err = of(nk+it.key, it.col, it.expr)
		case it.fn == aggMin || it.fn == aggMax:
			err = of(nk+len(ap.dkeys)+it.part, it.col, it.expr)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// finishStatement is the statement that finishes the partial rows:
//
//	SELECT [DISTINCT] items FROM (SELECT c0 [COLLATE …] AS c0, … FROM
//	unnest($1::T0[], …) AS u(c0, …)) AS t [GROUP BY keys] [HAVING …]
//	[ORDER BY …] [LIMIT n] [OFFSET m]
func (ap *aggPlan) finishStatement(cols []memrows.Column, rows [][]any, colls []*collation) (string, []any, error) {
	nk := len(ap.keys) + len(ap.dkeys)
	for _, it := range ap.items {
		if (it.fn == aggSum || it.fn == aggAvg) && cols[nk+it.part].DBType == "FLOAT4" {
			// Each shard's partial sum is rounded to real's 24 bits, which
			// one table's avg (accumulated in double precision) is not.
			return "", nil, refuseAgg("%s of real across shards: each shard's partial sum is rounded to real's precision (about 1e-7), one table's is not; cast the column to double precision (%s(col::float8)), or scope the query to one shard", it.name, it.name)
		}
	}
	var b strings.Builder
	args := make([]any, 0, len(cols)+4)
	var inner, arrays, names []string
	for i, ct := range cols {
		arr, typ, err := columnArray(ct.DBType, rows, i)
		if err != nil {
			return "", nil, refuseAgg("column %s of type %s cannot be finished in Postgres across shards: %v; scope the query to one shard", ct.Name, ct.DBType, err)
		}
		args = append(args, arr)
		c := "c" + strconv.Itoa(i)
		names = append(names, c)
		arrays = append(arrays, fmt.Sprintf("$%d::%s[]", i+1, typ))
		if colls[i] != nil && colls[i].coll != "" {
			c += " COLLATE " + pgx.Identifier{colls[i].schema, colls[i].coll}.Sanitize() + " AS c" + strconv.Itoa(i)
		}
		inner = append(inner, c)
	}
	b.WriteString("SELECT ")
	if ap.distinct {
		b.WriteString("DISTINCT ")
	}
	first := true
	for i, it := range ap.items {
		if it.hidden {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString(ap.finalSQL(i, cols))
		b.WriteString(" AS ")
		b.WriteString(sqlcond.QuoteIdent(it.name))
	}
	fmt.Fprintf(&b, " FROM (SELECT %s FROM unnest(%s) AS u(%s)) AS t", strings.Join(inner, ", "), strings.Join(arrays, ", "), strings.Join(names, ", "))
	if ap.byKeys {
		for i := range ap.keys {
			if i == 0 {
				b.WriteString(" GROUP BY ")
			} else {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "t.c%d", i)
		}
	}
	for i, h := range ap.having {
		if i == 0 {
			b.WriteString(" HAVING")
		}
		b.WriteByte(' ')
		switch {
		case h.isVar:
			args = append(args, h.v)
			fmt.Fprintf(&b, "$%d", len(args))
		case h.item >= 0:
			b.WriteString(ap.finalSQL(h.item, cols))
		case h.key >= 0:
			fmt.Fprintf(&b, "t.c%d", h.key)
		default:
			b.WriteString(h.text)
		}
	}
	for i, o := range ap.order {
		if i == 0 {
			b.WriteString(" ORDER BY ")
		} else {
			b.WriteString(", ")
		}
		if o.out >= 0 {
			b.WriteString(ap.finalSQL(o.out, cols))
		} else {
			fmt.Fprintf(&b, "t.c%d", o.key)
		}
		if o.desc {
			b.WriteString(" DESC")
		}
		if o.nullsFirst {
			b.WriteString(" NULLS FIRST")
		} else {
			b.WriteString(" NULLS LAST")
		}
	}
	if ap.limit >= 0 {
		fmt.Fprintf(&b, " LIMIT %d", ap.limit)
	}
	if ap.offset > 0 {
		fmt.Fprintf(&b, " OFFSET %d", ap.offset)
	}
	return b.String(), args, nil
}

// finalSQL is item i finished over the partial rows t, typed as one
// table's aggregate would be: a count of counts is a bigint, a sum of
// integer sums a bigint (a numeric's and a float's keep their type), an
// average the sum of sums over the sum of counts (numeric, or double
// precision for floats), as Postgres's own final functions compute it.
func (ap *aggPlan) finalSQL(i int, cols []memrows.Column) string {
	it := ap.items[i]
	nk := len(ap.keys) + len(ap.dkeys)
	c := func(j int) string { return "t.c" + strconv.Itoa(j) }
	p := nk + it.part
	switch it.fn {
	case aggNone:
		return c(it.key)
	case aggCount:
		if it.distinct {
			return "count(DISTINCT " + c(len(ap.keys)+it.key) + ")"
		}
		return "COALESCE(sum(" + c(p) + "), 0)::int8"
	case aggSum:
		if cols[p].DBType == "INT8" {
			return "sum(" + c(p) + ")::int8"
		}
		return "sum(" + c(p) + ")"
	case aggMin:
		return "min(" + c(p) + ")"
	case aggMax:
		return "max(" + c(p) + ")"
	case aggAvg:
		if pgorder.KindOf(cols[p].DBType) == pgorder.Float {
			return "(sum(" + c(p) + ") / NULLIF(sum(" + c(p+1) + "), 0)::float8)"
		}
		return "(sum(" + c(p) + ")::numeric / NULLIF(sum(" + c(p+1) + "), 0))"
	case aggAnd:
		return "bool_and(" + c(p) + ")"
	case aggOr:
		return "bool_or(" + c(p) + ")"
	}
	return "NULL"
}
