package plugin

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/shardkit/shardkit/internal/sqlcond"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Aggregates, GROUP BY and DISTINCT across shards. Each shard computes
// partial results (per group: count, sum, min, max; AVG as SUM and
// COUNT), one statement per server as for any multi-shard read; the
// plugin combines the partials of equal groups in Go, then applies
// DISTINCT, ORDER BY, OFFSET and LIMIT to the combined rows, and hands
// them to GORM's own scanning as if one table had answered (see
// read_merge_agg.go), so that destinations and value types are those of plain
// GORM. Shapes whose combination would not be exact are refused.

// aggFunc is an aggregate the plugin combines.
type aggFunc uint8

const (
	aggNone  aggFunc = iota // a grouped (or DISTINCT) column
	aggCount                // count(*), count(col), count(1)
	aggSum
	aggMin
	aggMax
	aggAvg // sum and count per shard
	aggAnd // bool_and, every
	aggOr  // bool_or
)

var aggNames = map[string]aggFunc{"count": aggCount, "sum": aggSum, "min": aggMin, "max": aggMax, "avg": aggAvg,
	"bool_and": aggAnd, "every": aggAnd, "bool_or": aggOr}

// aggItem is one item of the select list.
type aggItem struct {
	fn       aggFunc
	col      string // column; "" for count(*) or an expression
	expr     string // the argument, an expression over the row (SQL); "" for a column
	distinct bool   // count(DISTINCT …): the argument is a hidden key of each shard's groups (dkey)
	hidden   bool   // read by HAVING or ORDER BY only: not an output column
	name     string // output column name, as Postgres names it
	key      int    // aggNone: index of the key column; distinct: index of its dkey
	part     int    // first partial column (after the keys)
	sig      string // fn(arg), to match an ORDER BY or HAVING expression
}

// argSQL is the aggregate's argument as each shard computes it.
func (it aggItem) argSQL() string {
	switch {
	case it.expr != "":
		return it.expr
	case it.col != "":
		return sqlcond.QuoteIdent(it.col)
	}
	return "*"
}

// aggOrder is one ORDER BY term of the combined rows.
type aggOrder struct {
	out        int // output column, or -1
	key        int // key column (a grouped column not selected), when out < 0
	desc       bool
	nullsFirst bool
}

// aggPlan is the analysis of an aggregate, grouped or DISTINCT read.
type aggPlan struct {
	table    string // the model's table, for messages
	textColl string // a text column of the model not in byte order, "" if none
	// nondet: the model has text in a nondeterministic collation, whose
	// groups (equal values that differ as bytes) only Postgres makes
	nondet   bool
	items    []aggItem
	keys     []string // grouping columns (GROUP BY, or the DISTINCT columns)
	dkeys    []string // arguments of count(DISTINCT …): each shard groups by them too
	byKeys   bool     // GROUP BY columns: each shard groups by the keys
	having   []havingPart
	grouped  bool // GROUP BY, or aggregates: partials are combined per key
	distinct bool // SELECT DISTINCT
	nparts   int  // partial columns after the keys
	order    []aggOrder
	limit    int // -1: none
	offset   int
	push     bool // DISTINCT columns only: ORDER BY and LIMIT+OFFSET pushed to each shard
	noPush   bool // an ORDER BY term each shard's statement would read otherwise
}

// refuseAgg is the refusal of a multi-shard aggregate shape.
func refuseAgg(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnroutableSQL, fmt.Sprintf(format, args...))
}

// planAggregate reports whether a multi-shard read is an aggregate,
// grouped or DISTINCT read (ok), and plans it, or returns why it cannot
// be combined exactly. A plain count keeps its own path (counts add up).
func planAggregate(stmt *gorm.Statement, m *model, dest reflect.Value) (*aggPlan, bool, error) {
	gc, grouped := stmt.Clauses["GROUP BY"]
	switch dest.Kind() {
	case reflect.Int64, reflect.Int:
		if !grouped && !stmt.Distinct && isCount(stmt) && !hasFunctions(stmt, true) {
			return nil, false, nil // a plain count: the counts add up
		}
	}
	text, distinct, explicit, err := selectText(stmt)
	if err != nil {
		return nil, true, err
	}
	if !grouped && !distinct && (!strings.Contains(text, "(") || !aggregateCall(text)) {
		// no aggregate: rows (fanout's plain reads)
		return nil, false, nil
	}
	if !explicit {
		if grouped {
			return nil, true, refuseAgg("GROUP BY across shards needs the grouped columns and aggregates named in Select, e.g. Select(\"user_id, count(*) AS n\")")
		}
		return nil, true, refuseAgg("DISTINCT across shards needs its columns named, e.g. Distinct(\"user_id\")")
	}
	if len(stmt.Joins) > 0 {
		return nil, true, refuseAgg("aggregates, GROUP BY and DISTINCT across shards work on the model's own table only, not with Joins; scope the query to one shard")
	}
	ap := &aggPlan{distinct: distinct, grouped: grouped, limit: -1}
	if grouped {
		g, _ := gc.Expression.(clause.GroupBy)
		for _, c := range g.Columns {
			names := []string{c.Name}
			if c.Raw {
				names = splitTop(c.Name)
			}
			for _, n := range names {
				col, err := plainColumn(stmt, m, n)
				if err != nil {
					return nil, true, refuseAgg("GROUP BY %q across shards: only plain columns of %s are grouped exactly", strings.TrimSpace(n), m.table)
				}
				ap.addKey(col)
			}
		}
		ap.byKeys = len(ap.keys) > 0
		if !ap.byKeys && len(g.Having) == 0 {
			return nil, true, refuseAgg("GROUP BY without columns cannot be merged across shards")
		}
	}
	if err := ap.parseItems(stmt, m, text); err != nil {
		return nil, true, err
	}
	if err := ap.parseOrder(stmt, m); err != nil {
		return nil, true, err
	}
	if grouped {
		g, _ := gc.Expression.(clause.GroupBy)
		if err := ap.parseHaving(stmt, m, g.Having); err != nil {
			return nil, true, err
		}
	}
	if c, ok := stmt.Clauses["LIMIT"]; ok {
		if l, ok := c.Expression.(clause.Limit); ok {
			ap.offset = l.Offset
			if l.Limit != nil {
				ap.limit = *l.Limit
			}
		}
	}
	// Only the rows of plain DISTINCT columns can be cut per shard: the
	// first LIMIT+OFFSET distinct rows of the whole answer are among the
	// first LIMIT+OFFSET of the shards that hold them. A grouped row's
	// value needs every shard's part.
	ap.push = !ap.grouped && ap.limit >= 0 && !ap.noPush
	return ap, true, nil
}

// selectText returns the select list GORM will build, whether it is
// DISTINCT, and whether it is explicit (not GORM's * or the
// destination's fields).
func selectText(stmt *gorm.Statement) (text string, distinct, explicit bool, err error) {
	if c, ok := stmt.Clauses["SELECT"]; ok && c.Expression != nil {
		switch e := c.Expression.(type) {
		case clause.Select:
			var parts []string
			for _, col := range e.Columns {
				if col.Raw {
					parts = append(parts, col.Name)
				} else {
					parts = append(parts, sqlcond.QuoteIdent(col.Name))
				}
			}
			return strings.Join(parts, ", "), e.Distinct, len(parts) > 0, nil
		case clause.Expr:
			t, ok := columnVars(e)
			if !ok {
				return "", false, true, refuseAgg("a select list with bind variables cannot be merged across shards; scope the query to one shard")
			}
			t = strings.TrimSpace(t)
			if len(t) > 9 && strings.EqualFold(t[:9], "distinct ") {
				return strings.TrimSpace(t[9:]), true, true, nil
			}
			return t, false, true, nil
		default:
			return "", false, true, refuseAgg("this select list cannot be merged across shards; scope the query to one shard")
		}
	}
	if len(stmt.Selects) == 0 {
		return "", stmt.Distinct, false, nil
	}
	parts := make([]string, len(stmt.Selects))
	for i, s := range stmt.Selects {
		parts[i] = s
		if stmt.Schema != nil {
			if f := stmt.Schema.LookUpField(s); f != nil {
				parts[i] = sqlcond.QuoteIdent(f.DBName)
			}
		}
	}
	return strings.Join(parts, ", "), stmt.Distinct, true, nil
}

// partialSQL is the select list each shard runs: the key columns, the
// arguments of count(DISTINCT …), then each aggregate's partials.
func (ap *aggPlan) partialSQL() string {
	var terms []string
	for _, k := range ap.keys {
		terms = append(terms, sqlcond.QuoteIdent(k))
	}
	terms = append(terms, ap.dkeys...)
	for _, it := range ap.items {
		if it.fn == aggNone || it.distinct {
			continue
		}
		arg := it.argSQL()
		switch it.fn {
		case aggCount:
			terms = append(terms, "count("+arg+")")
		case aggSum:
			terms = append(terms, "sum("+arg+")")
		case aggMin:
			terms = append(terms, "min("+arg+")")
		case aggMax:
			terms = append(terms, "max("+arg+")")
		case aggAvg:
			terms = append(terms, "sum("+arg+")", "count("+arg+")")
		case aggAnd:
			terms = append(terms, "bool_and("+arg+")")
		case aggOr:
			terms = append(terms, "bool_or("+arg+")")
		}
	}
	out := strings.Join(terms, ", ")
	if ap.distinct && !ap.grouped {
		out = "DISTINCT " + out
	}
	return out
}

// shardClauses are the clauses of each shard's statement: the partial
// select list, grouped by the keys and the distinct arguments, without
// HAVING (applied to the combined groups); no ORDER BY or LIMIT unless
// pushed down.
func (ap *aggPlan) shardClauses(base map[string]clause.Clause) map[string]clause.Clause {
	out := cloneWith(base, "SELECT", clause.Clause{Name: "SELECT", Expression: clause.Expr{SQL: ap.partialSQL()}})
	delete(out, "GROUP BY")
	if ap.byKeys || len(ap.dkeys) > 0 {
		var g clause.GroupBy
		if ap.byKeys {
			for _, k := range ap.keys {
				g.Columns = append(g.Columns, clause.Column{Name: k})
			}
		}
		for _, e := range ap.dkeys {
			g.Columns = append(g.Columns, clause.Column{Name: e, Raw: true})
		}
		out["GROUP BY"] = clause.Clause{Name: "GROUP BY", Expression: g}
	}
	if ap.push {
		c := out["LIMIT"]
		out["LIMIT"] = clause.Clause{Name: c.Name, Expression: literalLimit(ap.limit + ap.offset), BeforeExpression: c.BeforeExpression, AfterExpression: c.AfterExpression, AfterNameExpression: c.AfterNameExpression}
	} else {
		delete(out, "ORDER BY")
		delete(out, "LIMIT")
	}
	return out
}

// columnVars writes the columns a select expression binds (Count of a
// Distinct column builds COUNT(DISTINCT(?)) with the column) into its
// text; ok is false for any other bind variable.
func columnVars(e clause.Expr) (string, bool) {
	if len(e.Vars) == 0 {
		return e.SQL, true
	}
	var b strings.Builder
	v := 0
	for i := 0; i < len(e.SQL); i++ {
		if e.SQL[i] != '?' {
			b.WriteByte(e.SQL[i])
			continue
		}
		if v >= len(e.Vars) {
			return "", false
		}
		c, ok := e.Vars[v].(clause.Column)
		v++
		if !ok || c.Raw || c.Alias != "" || c.Table != "" && c.Table != clause.CurrentTable {
			return "", false
		}
		b.WriteString(sqlcond.QuoteIdent(c.Name))
	}
	return b.String(), v == len(e.Vars)
}
