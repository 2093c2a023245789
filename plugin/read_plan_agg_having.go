package plugin

import (
	"fmt"
	"reflect"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/sqlcond"
)

// Reading HAVING conditions of an aggregate read across shards into the
// statement that finishes the partial groups in Postgres (read_merge_agg_final.go).

// havingPart is a piece of a HAVING condition rewritten over the
// partial groups: SQL text, an aggregate (item), a grouped column (key)
// or a bind variable.
type havingPart struct {
	text  string
	item  int // index in aggPlan.items, -1: none
	key   int // index in aggPlan.keys, -1: none
	v     any
	isVar bool
}

// parseHaving reads HAVING conditions (strings with ? placeholders, as
// Having("count(*) > ?", n) gives): each aggregate becomes the finished
// aggregate of the partial groups (a hidden item when it is not
// selected), each grouped column its key, each ? its value.
func (ap *aggPlan) parseHaving(stmt *gorm.Statement, m *model, exprs []clause.Expression) error {
	for j, e := range exprs {
		x, ok := e.(clause.Expr)
		if !ok {
			return refuseAgg("HAVING across shards is merged for conditions written as text with ? placeholders, e.g. Having(\"count(*) > ?\", 1); scope the query to one shard")
		}
		toks, params, ok := sqlcond.Lex(x.SQL, true, nil)
		if !ok || params != len(x.Vars) {
			return refuseAgg("HAVING %q cannot be read to apply it to groups merged across shards; scope the query to one shard", x.SQL)
		}
		if j > 0 {
			ap.having = append(ap.having, havingPart{text: " AND ", item: -1, key: -1})
		}
		ap.having = append(ap.having, havingPart{text: "(", item: -1, key: -1})
		if err := ap.havingTokens(stmt, m, toks, x); err != nil {
			return err
		}
		ap.having = append(ap.having, havingPart{text: ")", item: -1, key: -1})
	}
	return nil
}

// havingWords are keywords of a condition that name no column.
var havingWords = map[string]bool{"and": true, "or": true, "not": true, "is": true, "null": true, "true": true, "false": true,
	"between": true, "symmetric": true, "like": true, "ilike": true, "in": true, "distinct": true, "from": true, "unknown": true,
	"escape": true, "similar": true, "to": true, "isnull": true, "notnull": true}

func (ap *aggPlan) havingTokens(stmt *gorm.Statement, m *model, toks []sqlcond.Token, x clause.Expr) error {
	add := func(p havingPart) { ap.having = append(ap.having, p) }
	for i := 0; i < len(toks); {
		t := toks[i]
		call := t.Kind == sqlcond.Ident && !t.Quoted && i+1 < len(toks) && toks[i+1].Kind == sqlcond.LParen
		switch {
		case t.Keyword("select") || t.Keyword("over") || t.Keyword("filter") || t.Keyword("exists"):
			return refuseAgg("HAVING %q across shards: sub-queries, windows and FILTER in HAVING cannot be applied to merged groups; scope the query to one shard", x.SQL)
		case call && aggNames[t.Text] != 0:
			end := sqlcond.Closing(toks, i+1)
			probe := aggPlan{}
			it, err := probe.parseItem(stmt, m, toks[i:end+1])
			if err != nil {
				return fmt.Errorf("HAVING: %w", err)
			}
			add(havingPart{item: ap.havingItem(it), key: -1})
			i = end + 1
		case call && !sqlcond.IsReserved(t) && !havingWords[t.Text]:
			return refuseAgg("HAVING %q across shards: it calls %s; across shards HAVING compares count, sum, min, max, avg, bool_and and bool_or of the groups, and grouped columns, with operators; scope the query to one shard", x.SQL, t.Text)
		case t.Kind == sqlcond.Param:
			v := x.Vars[t.Num]
			if !plainValue(v) {
				return refuseAgg("HAVING %q across shards: its value %T is not one value; scope the query to one shard", x.SQL, v)
			}
			add(havingPart{v: v, isVar: true, item: -1, key: -1})
			i++
		case t.Kind == sqlcond.Ident && (t.Quoted || !sqlcond.IsReserved(t) && !havingWords[t.Text]) && !(i > 0 && toks[i-1].Kind == sqlcond.Op && toks[i-1].Text == "::"):
			col, end := sqlcond.ColumnAt(toks, i)
			c, err := ownColumn(stmt, m, toks[i:end], col)
			key := -1
			if err == nil && ap.byKeys {
				key = slices.Index(ap.keys, c)
			}
			if key < 0 {
				return refuseAgg("HAVING %q across shards: %s is not a grouped column of %s; HAVING reads grouped columns and aggregates", x.SQL, sqlcond.Text(toks[i:end]), m.table)
			}
			add(havingPart{key: key, item: -1})
			i = end
		default:
			add(havingPart{text: tokensSQL(toks[i : i+1]), item: -1, key: -1})
			i++
		}
	}
	return nil
}

// havingItem returns the item that computes an aggregate HAVING reads:
// one of the select list's, or a hidden one added for it.
func (ap *aggPlan) havingItem(it aggItem) int {
	for i, x := range ap.items {
		if x.fn == it.fn && x.sig == it.sig {
			return i
		}
	}
	it.hidden = true
	ap.place(&it)
	ap.items = append(ap.items, it)
	return len(ap.items) - 1
}

// plainValue reports whether a bind variable is one scalar value.
func plainValue(v any) bool {
	switch v.(type) {
	case nil, time.Time, []byte:
		return true
	}
	k := reflect.ValueOf(v).Kind()
	return k >= reflect.Bool && k <= reflect.Float64 || k == reflect.String
}
