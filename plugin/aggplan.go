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
// aggmerge.go), so that destinations and value types are those of plain
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
)

var aggNames = map[string]aggFunc{"count": aggCount, "sum": aggSum, "min": aggMin, "max": aggMax, "avg": aggAvg}

// aggItem is one item of the select list.
type aggItem struct {
	fn   aggFunc
	col  string // column; "" for count(*)
	name string // output column name, as Postgres names it
	key  int    // aggNone: index of the key column
	part int    // first partial column (after the keys)
	sig  string // fn(col), to match an ORDER BY expression
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
	items    []aggItem
	keys     []string // grouping columns (GROUP BY, or the DISTINCT columns)
	grouped  bool     // GROUP BY, or aggregates: partials are combined per key
	distinct bool     // SELECT DISTINCT
	nparts   int      // partial columns after the keys
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
	if !grouped && !distinct && !strings.Contains(text, "(") {
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
		if len(g.Having) > 0 {
			return nil, true, refuseAgg("HAVING across shards is not supported; filter the grouped rows in Go after the query, or scope the query to one shard")
		}
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
		if len(ap.keys) == 0 {
			return nil, true, refuseAgg("GROUP BY without columns cannot be merged across shards")
		}
	}
	if err := ap.parseItems(stmt, m, text); err != nil {
		return nil, true, err
	}
	if err := ap.parseOrder(stmt, m); err != nil {
		return nil, true, err
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
			if c := strings.ToLower(strings.Join(strings.Fields(e.SQL), "")); strings.HasPrefix(c, "count(distinct") {
				return "", false, true, refuseAgg("a distinct count across shards does not add up from per-shard counts; read the distinct values (Distinct(col).Pluck) and count them, or scope the query to one shard")
			}
			if len(e.Vars) > 0 {
				return "", false, true, refuseAgg("a select list with bind variables cannot be merged across shards; scope the query to one shard")
			}
			t := strings.TrimSpace(e.SQL)
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

// partialSQL is the select list each shard runs: the key columns, then
// each aggregate's partials.
func (ap *aggPlan) partialSQL() string {
	var b strings.Builder
	if ap.distinct && !ap.grouped {
		b.WriteString("DISTINCT ")
	}
	for i, k := range ap.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sqlcond.QuoteIdent(k))
	}
	for _, it := range ap.items {
		if it.fn == aggNone {
			continue
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "DISTINCT ") {
			b.WriteString(", ")
		}
		arg := "*"
		if it.col != "" {
			arg = sqlcond.QuoteIdent(it.col)
		}
		switch it.fn {
		case aggCount:
			b.WriteString("count(" + arg + ")")
		case aggSum:
			b.WriteString("sum(" + arg + ")")
		case aggMin:
			b.WriteString("min(" + arg + ")")
		case aggMax:
			b.WriteString("max(" + arg + ")")
		case aggAvg:
			b.WriteString("sum(" + arg + "), count(" + arg + ")")
		}
	}
	return b.String()
}

// shardClauses are the clauses of each shard's statement: the partial
// select list; no ORDER BY or LIMIT unless pushed down.
func (ap *aggPlan) shardClauses(base map[string]clause.Clause) map[string]clause.Clause {
	out := cloneWith(base, "SELECT", clause.Clause{Name: "SELECT", Expression: clause.Expr{SQL: ap.partialSQL()}})
	if ap.push {
		c := out["LIMIT"]
		out["LIMIT"] = clause.Clause{Name: c.Name, Expression: literalLimit(ap.limit + ap.offset), BeforeExpression: c.BeforeExpression, AfterExpression: c.AfterExpression, AfterNameExpression: c.AfterNameExpression}
	} else {
		delete(out, "ORDER BY")
		delete(out, "LIMIT")
	}
	return out
}
