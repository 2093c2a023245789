package plugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/sqlcond"
)

// Reading an aggregate read's select list and ORDER BY into its aggPlan.

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
	hasAgg := false
	for _, it := range sqlcond.Items(toks) {
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
		ap.place(&ap.items[i])
	}
	return nil
}

// place gives an aggregate its partial columns, or, for count(DISTINCT
// …), its argument's place among the keys each shard groups by.
func (ap *aggPlan) place(it *aggItem) {
	switch {
	case it.fn == aggNone:
	case it.distinct:
		ap.grouped = true
		arg := it.argSQL()
		it.key = slices.Index(ap.dkeys, arg)
		if it.key < 0 {
			it.key = len(ap.dkeys)
			ap.dkeys = append(ap.dkeys, arg)
		}
	default:
		it.part = ap.nparts
		ap.nparts++
		if it.fn == aggAvg {
			ap.nparts++
		}
	}
}

func (ap *aggPlan) parseItem(stmt *gorm.Statement, m *model, t []sqlcond.Token) (aggItem, error) {
	src := sqlcond.Text(t)
	var it aggItem
	n := 0
	if len(t) >= 3 && t[0].Kind == sqlcond.Ident && !t[0].Quoted && t[1].Kind == sqlcond.LParen {
		fn, known := aggNames[t[0].Text]
		end := sqlcond.Closing(t, 1)
		if !known {
			return it, refuseAgg("%s in the select list: across shards only count, sum, min, max, avg, bool_and, bool_or and every of a column or an expression, and count(DISTINCT …), are merged exactly (string_agg and array_agg have no order one table would give; other functions have no combine step); compute it from those, or scope the query to one shard", src)
		}
		arg := t[2:end]
		switch {
		case len(arg) == 1 && arg[0].Kind == sqlcond.Op && arg[0].Text == "*" && fn == aggCount:
		case len(arg) == 1 && arg[0].Kind == sqlcond.Number && fn == aggCount:
			if v, err := strconv.ParseFloat(arg[0].Text, 64); err != nil || v != 1 {
				return it, refuseAgg("%s across shards: count a column or count(*)", src)
			}
		case len(arg) >= 2 && arg[0].Keyword("distinct"):
			if fn != aggCount {
				return it, refuseAgg("%s across shards: of the DISTINCT aggregates only count(DISTINCT …) is merged; scope the query to one shard", src)
			}
			c, e, err := ap.argument(stmt, m, arg[1:], src)
			if err != nil {
				return it, err
			}
			it.col, it.expr, it.distinct = c, e, true
		default:
			c, e, err := ap.argument(stmt, m, arg, src)
			if err != nil {
				return it, err
			}
			it.col, it.expr = c, e
		}
		it.fn = fn
		it.name = t[0].Text
		it.sig = t[0].Text + "(" + it.argSQL() + ")"
		if it.distinct {
			it.sig = t[0].Text + "(distinct " + it.argSQL() + ")"
		}
		n = end + 1
	} else {
		col, k := sqlcond.ColumnAt(t, 0)
		if col == "" {
			return it, refuseAgg("%s in the select list cannot be merged across shards: select plain columns and aggregates (count, sum, min, max, avg, bool_and, bool_or) of a column or expression", src)
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
		return it, refuseAgg("%s in the select list cannot be merged across shards (window functions and FILTER work per shard: a window's rows or a filtered aggregate's parts are not combined); scope the query to one shard", src)
	}
	return it, nil
}

// argument reads an aggregate's argument: a plain column of the model
// (col), or an expression over the row (expr, its SQL as each shard runs
// it). An expression is computed per row by each shard, so it may call
// functions and operators, but not read other rows or tables (no
// aggregate, window, sub-query or bind variable).
func (ap *aggPlan) argument(stmt *gorm.Statement, m *model, arg []sqlcond.Token, src string) (col, expr string, err error) {
	if c, k := sqlcond.ColumnAt(arg, 0); c != "" && k == len(arg) {
		own, err := ownColumn(stmt, m, arg, c)
		if err != nil {
			return "", "", refuseAgg("%s across shards: %s is not a column of %s", src, sqlcond.Text(arg), m.table)
		}
		return own, "", nil
	}
	for i, t := range arg {
		switch {
		case t.Kind == sqlcond.Param:
			return "", "", refuseAgg("%s across shards: an aggregate's argument with bind variables cannot be merged; scope the query to one shard", src)
		case t.Keyword("select") || t.Keyword("over") || t.Keyword("filter") || t.Keyword("within"):
			return "", "", refuseAgg("%s across shards: an aggregate of a sub-query, window or filtered expression cannot be merged; scope the query to one shard", src)
		case t.Kind == sqlcond.Ident && !t.Quoted && i+1 < len(arg) && arg[i+1].Kind == sqlcond.LParen && (aggNames[t.Text] != 0 || notCombined[t.Text]):
			return "", "", refuseAgg("%s across shards: an aggregate inside an aggregate cannot be merged; scope the query to one shard", src)
		case t.Kind == sqlcond.Dot && i == 1 && !m.ownTable(stmt, arg[0].Text):
			return "", "", refuseAgg("%s across shards: %s is not a column of %s", src, sqlcond.Text(arg), m.table)
		}
	}
	return "", tokensSQL(arg), nil
}

// notCombined are aggregates with no combine step the plugin runs (or
// whose result depends on an order the shards' rows do not have).
var notCombined = map[string]bool{"string_agg": true, "array_agg": true, "json_agg": true, "jsonb_agg": true, "xmlagg": true,
	"json_object_agg": true, "jsonb_object_agg": true, "percentile_cont": true, "percentile_disc": true, "mode": true,
	"stddev": true, "stddev_pop": true, "stddev_samp": true, "variance": true, "var_pop": true, "var_samp": true,
	"corr": true, "covar_pop": true, "covar_samp": true, "regr_slope": true, "bit_and": true, "bit_or": true, "bit_xor": true,
	"range_agg": true, "range_intersect_agg": true}

// tokensSQL writes tokens back as SQL Postgres reads as the same
// expression: identifiers quoted as lexed, literals escaped.
func tokensSQL(t []sqlcond.Token) string {
	var b strings.Builder
	var open []string
	for i, k := range t {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch k.Kind {
		case sqlcond.LParen:
			b.WriteString(k.Text)
			open = append(open, map[string]string{"(": ")", "[": "]"}[k.Text])
		case sqlcond.RParen:
			if len(open) == 0 {
				b.WriteByte(')')
				continue
			}
			b.WriteString(open[len(open)-1])
			open = open[:len(open)-1]
		case sqlcond.Comma:
			b.WriteByte(',')
		case sqlcond.Dot:
			b.WriteByte('.')
		case sqlcond.String:
			b.WriteString("'" + strings.ReplaceAll(k.Text, "'", "''") + "'")
		case sqlcond.Ident:
			if k.Quoted {
				b.WriteString(sqlcond.QuoteIdent(k.Text))
			} else {
				b.WriteString(k.Text)
			}
		default:
			b.WriteString(k.Text)
		}
	}
	return b.String()
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
		text := orderColumnText(m, col)
		toks, _, ok := sqlcond.Lex(text, false, nil)
		if !ok {
			return refuseAgg("ORDER BY %q cannot be applied to rows merged across shards", text)
		}
		for _, term := range sqlcond.Items(toks) {
			if err := ap.orderTerm(stmt, m, term); err != nil {
				return err
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
		if err != nil || pos < 1 || pos > len(ap.items) || ap.items[pos-1].hidden {
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
		if err != nil {
			return refuseAgg("ORDER BY %s across shards: %v", src, err)
		}
		if it.fn == aggNone || !ap.grouped {
			return refuseAgg("ORDER BY %s across shards: order by an aggregate that is also in the Select list, or by its alias", src)
		}
		// an aggregate not selected: each shard computes its partial,
		// and the groups are finished in Postgres (read_merge_agg_final.go)
		o.out = ap.havingItem(it)
		ap.noPush = true
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
