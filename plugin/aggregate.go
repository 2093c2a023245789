package plugin

import (
	"fmt"
	"reflect"
	"strconv"
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
// aggrows.go), so that destinations and value types are those of plain
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

// plainColumn reads a column of the model's table: name, "name", table.name.
func plainColumn(stmt *gorm.Statement, m *model, s string) (string, error) {
	toks, _, ok := sqlcond.Lex(strings.TrimSpace(s), false, nil)
	if !ok {
		return "", errNotColumn
	}
	col, n := sqlcond.ColumnAt(toks, 0)
	if n != len(toks) || col == "" {
		return "", errNotColumn
	}
	return ownColumn(stmt, m, toks[0:n], col)
}

var errNotColumn = fmt.Errorf("not a column")

// ownColumn checks that a column reference names a column of the model.
func ownColumn(stmt *gorm.Statement, m *model, ref []sqlcond.Token, col string) (string, error) {
	if len(ref) == 3 && !m.ownTable(stmt, ref[0].Text) {
		return "", errNotColumn
	}
	if f := m.schema.LookUpField(col); f == nil || f.DBName != col {
		return "", errNotColumn
	}
	return col, nil
}

func (ap *aggPlan) addKey(col string) int {
	for i, k := range ap.keys {
		if k == col {
			return i
		}
	}
	ap.keys = append(ap.keys, col)
	return len(ap.keys) - 1
}

// parseItems reads the select list: plain columns and count, sum, min,
// max, avg over a column, each with an optional alias.
func (ap *aggPlan) parseItems(stmt *gorm.Statement, m *model, text string) error {
	toks, _, ok := sqlcond.Lex(text, false, nil)
	if !ok || len(toks) == 0 {
		return refuseAgg("select list %q cannot be read to merge it across shards; scope the query to one shard", text)
	}
	var items [][]sqlcond.Token
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && toks[i].Kind == sqlcond.LParen {
			i = toks[i].Match
			continue
		}
		if i == len(toks) || toks[i].Kind == sqlcond.Comma {
			items = append(items, toks[start:i])
			start = i + 1
		}
	}
	hasAgg := false
	for _, it := range items {
		item, err := ap.parseItem(stmt, m, it)
		if err != nil {
			return err
		}
		if item.fn != aggNone {
			hasAgg = true
		}
		ap.items = append(ap.items, item)
	}
	if hasAgg {
		ap.grouped = true
	}
	for i := range ap.items {
		it := &ap.items[i]
		if it.fn != aggNone {
			continue
		}
		if ap.grouped {
			k := -1
			for j, key := range ap.keys {
				if key == it.col {
					k = j
				}
			}
			if k < 0 {
				return refuseAgg("column %s is selected with aggregates but not grouped; across shards every selected column must be in Group (and Postgres requires it)", it.col)
			}
			it.key = k
		} else {
			it.key = ap.addKey(it.col)
		}
	}
	for i := range ap.items {
		it := &ap.items[i]
		if it.fn == aggNone {
			continue
		}
		it.part = ap.nparts
		ap.nparts++
		if it.fn == aggAvg {
			ap.nparts++
		}
	}
	return nil
}

func (ap *aggPlan) parseItem(stmt *gorm.Statement, m *model, t []sqlcond.Token) (aggItem, error) {
	src := sqlcond.Text(t)
	var it aggItem
	n := 0
	if len(t) >= 3 && t[0].Kind == sqlcond.Ident && !t[0].Quoted && t[1].Kind == sqlcond.LParen {
		fn, known := aggNames[t[0].Text]
		end := sqlcond.Closing(t, 1)
		if !known {
			return it, refuseAgg("%s in the select list: across shards only count, sum, min, max and avg of a column (and grouped columns) are merged exactly; compute it from those, or scope the query to one shard", src)
		}
		arg := t[2:end]
		switch {
		case len(arg) == 1 && arg[0].Kind == sqlcond.Op && arg[0].Text == "*" && fn == aggCount:
		case len(arg) == 1 && arg[0].Kind == sqlcond.Number && fn == aggCount:
			if v, err := strconv.ParseFloat(arg[0].Text, 64); err != nil || v != 1 {
				return it, refuseAgg("%s across shards: count a column or count(*)", src)
			}
		case len(arg) >= 1 && arg[0].Kind == sqlcond.Ident && !arg[0].Quoted && arg[0].Text == "distinct":
			return it, refuseAgg("%s across shards: a distinct count does not add up from per-shard counts; read the distinct values (Distinct(col).Pluck) and count them, or scope the query to one shard", src)
		default:
			col, k := sqlcond.ColumnAt(arg, 0)
			if col == "" || k != len(arg) {
				return it, refuseAgg("%s across shards: only an aggregate of a plain column is merged exactly; scope the query to one shard", src)
			}
			c, err := ownColumn(stmt, m, arg, col)
			if err != nil {
				return it, refuseAgg("%s across shards: %s is not a column of %s", src, sqlcond.Text(arg), m.table)
			}
			it.col = c
		}
		it.fn = fn
		it.name = t[0].Text
		it.sig = t[0].Text + "(" + it.col + ")"
		n = end + 1
	} else {
		col, k := sqlcond.ColumnAt(t, 0)
		if col == "" {
			return it, refuseAgg("%s in the select list cannot be merged across shards: select plain columns and count, sum, min, max or avg of a column", src)
		}
		c, err := ownColumn(stmt, m, t[:k], col)
		if err != nil {
			return it, refuseAgg("%s in the select list is not a column of %s", src, m.table)
		}
		it.col, it.name, it.sig = c, c, c
		n = k
	}
	switch {
	case n == len(t):
	case n+2 == len(t) && t[n].Kind == sqlcond.Ident && !t[n].Quoted && t[n].Text == "as" && t[n+1].Kind == sqlcond.Ident:
		it.name = t[n+1].Text
	case n+1 == len(t) && t[n].Kind == sqlcond.Ident && t[n].Text != "over" && t[n].Text != "filter":
		it.name = t[n].Text
	default:
		return it, refuseAgg("%s in the select list cannot be merged across shards (window functions, FILTER and expressions work per shard); scope the query to one shard", src)
	}
	return it, nil
}

// parseOrder resolves the ORDER BY terms against the combined rows: an
// output column (by name, position or the same aggregate), else a
// grouped column.
func (ap *aggPlan) parseOrder(stmt *gorm.Statement, m *model) error {
	c, ok := stmt.Clauses["ORDER BY"]
	if !ok {
		return nil
	}
	ob, ok := c.Expression.(clause.OrderBy)
	if !ok || ob.Expression != nil {
		return refuseAgg("this ORDER BY cannot be applied to rows merged across shards; order by selected columns")
	}
	for _, col := range ob.Columns {
		text := col.Column.Name
		if !col.Column.Raw {
			name, table := col.Column.Name, col.Column.Table
			if name == clause.PrimaryKey {
				name = m.pk.DBName // First and Last order by the primary key
			}
			if table == clause.CurrentTable {
				table = m.table
			}
			text = sqlcond.QuoteIdent(name)
			if table != "" {
				text = sqlcond.QuoteIdent(table) + "." + text
			}
			if col.Desc {
				text += " DESC"
			}
		}
		toks, _, ok := sqlcond.Lex(text, false, nil)
		if !ok {
			return refuseAgg("ORDER BY %q cannot be applied to rows merged across shards", text)
		}
		start := 0
		for i := 0; i <= len(toks); i++ {
			if i < len(toks) && toks[i].Kind == sqlcond.LParen {
				i = toks[i].Match
				continue
			}
			if i == len(toks) || toks[i].Kind == sqlcond.Comma {
				if err := ap.orderTerm(stmt, m, toks[start:i]); err != nil {
					return err
				}
				start = i + 1
			}
		}
	}
	return nil
}

func (ap *aggPlan) orderTerm(stmt *gorm.Statement, m *model, t []sqlcond.Token) error {
	src := sqlcond.Text(t)
	o := aggOrder{out: -1, key: -1}
	// trailing ASC/DESC and NULLS FIRST/LAST
	n := len(t)
	nulls := ""
	if n >= 2 && t[n-2].Kind == sqlcond.Ident && !t[n-2].Quoted && t[n-2].Text == "nulls" && t[n-1].Kind == sqlcond.Ident && !t[n-1].Quoted {
		nulls = t[n-1].Text
		n -= 2
	}
	if n >= 1 && t[n-1].Kind == sqlcond.Ident && !t[n-1].Quoted && (t[n-1].Text == "asc" || t[n-1].Text == "desc") {
		o.desc = t[n-1].Text == "desc"
		n--
	}
	o.nullsFirst = o.desc
	switch nulls {
	case "":
	case "first":
		o.nullsFirst = true
	case "last":
		o.nullsFirst = false
	default:
		return refuseAgg("ORDER BY %s cannot be applied to rows merged across shards", src)
	}
	e := t[:n]
	switch {
	case len(e) == 1 && e[0].Kind == sqlcond.Number:
		pos, err := strconv.Atoi(e[0].Text)
		if err != nil || pos < 1 || pos > len(ap.items) {
			return refuseAgg("ORDER BY %s: no such output column", src)
		}
		o.out = pos - 1
		ap.noPush = true
	case len(e) == 1 && e[0].Kind == sqlcond.Ident:
		for i, it := range ap.items {
			if it.name == e[0].Text {
				if o.out >= 0 {
					return refuseAgg("ORDER BY %s is ambiguous", src)
				}
				o.out = i
			}
		}
		if o.out < 0 {
			return ap.orderByColumn(stmt, m, e, o, src)
		}
		if ap.items[o.out].name != ap.items[o.out].col {
			ap.noPush = true // an alias: the shards' select list has none
		}
	case len(e) == 3 && e[1].Kind == sqlcond.Dot:
		return ap.orderByColumn(stmt, m, e, o, src)
	case len(e) >= 3 && e[0].Kind == sqlcond.Ident && e[1].Kind == sqlcond.LParen && sqlcond.Closing(e, 1) == len(e)-1:
		probe := aggPlan{}
		it, err := probe.parseItem(stmt, m, e)
		if err == nil {
			for i, x := range ap.items {
				if x.fn == it.fn && x.sig == it.sig {
					o.out = i
					break
				}
			}
		}
		ap.noPush = true
		if o.out < 0 {
			return refuseAgg("ORDER BY %s across shards: order by an aggregate that is also in the Select list, or by its alias", src)
		}
	default:
		return refuseAgg("ORDER BY %s cannot be applied to rows merged across shards; order by selected columns or aggregates", src)
	}
	ap.order = append(ap.order, o)
	return nil
}

// orderByColumn resolves an ORDER BY input column: a selected plain
// column, or (grouped) a grouped column.
func (ap *aggPlan) orderByColumn(stmt *gorm.Statement, m *model, e []sqlcond.Token, o aggOrder, src string) error {
	col, k := sqlcond.ColumnAt(e, 0)
	c, err := ownColumn(stmt, m, e[:k], col)
	if err != nil || k != len(e) {
		return refuseAgg("ORDER BY %s is not a column of %s", src, m.table)
	}
	for i, it := range ap.items {
		if it.fn == aggNone && it.col == c {
			o.out = i
			ap.order = append(ap.order, o)
			return nil
		}
	}
	if ap.grouped && !ap.distinct {
		for i, key := range ap.keys {
			if key == c {
				o.key = i
				ap.order = append(ap.order, o)
				return nil
			}
		}
	}
	return refuseAgg("ORDER BY %s across shards: order by a selected or grouped column", src)
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
