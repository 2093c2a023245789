package plugin

import (
	"database/sql/driver"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/shardkit/shardkit/internal/sqlcond"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// The analysis of a statement's conditions: which logical shards hold the
// rows it can touch. It is conservative: a condition it cannot read says
// nothing, so that AND-ed with readable ones it only narrows what they
// name, and OR-ed with them it leaves the statement unconstrained (and so
// refused, or fanned out under AllShards).
//
// Two paths give the same answer. The fast path reads GORM's clause tree
// when it is a plain AND of equality, IN and single-comparison fragments
// (what nearly every statement is). Everything else — OR, NOT, groups,
// fragments with AND/OR inside, expressions and sub-queries as values —
// takes the exact path: GORM builds the WHERE text it is about to send,
// and that text is read as Postgres reads it, so GORM's own rules for
// parentheses and OR placement cannot fool the analysis.

// whereShards returns the shards the statement's WHERE clause can match,
// and whether the clause is a plain AND (so conditions GORM appends
// later, like a model's primary key, narrow it further).
func (m *model) whereShards(stmt *gorm.Statement, cs clauseScan, snap *router.Snapshot) (shardSet, bool, error) {
	if !cs.hasWhere {
		return shardSet{}, true, nil
	}
	w, ok := cs.where.Expression.(clause.Where)
	if !ok {
		return shardSet{}, false, nil
	}
	set, fast, err := m.fastShards(stmt, w.Exprs, snap)
	if fast || err != nil {
		return set, true, err
	}
	set, err = m.textShards(stmt, w, snap)
	return set, false, err
}

// fastShards reads a WHERE that is an AND of simple conditions. fast is
// false when the clause needs the exact path.
func (m *model) fastShards(stmt *gorm.Statement, exprs []clause.Expression, snap *router.Snapshot) (set shardSet, fast bool, err error) {
	for _, e := range exprs {
		var got shardSet
		switch x := e.(type) {
		case clause.Eq:
			if inline(x.Value) {
				return set, false, nil
			}
			if k := m.column(stmt, x.Column); k != 0 && x.Value != nil {
				got, err = valueShards(k, x.Value, snap)
			}
		case clause.IN:
			for _, v := range x.Values {
				if inline(v) {
					return set, false, nil
				}
			}
			if k := m.column(stmt, x.Column); k != 0 {
				if len(x.Values) == 0 {
					got = none // IN (NULL)
				} else {
					got, err = listShards(k, x.Values, snap)
				}
			}
		case clause.Neq, clause.Gt, clause.Gte, clause.Lt, clause.Lte, clause.Like:
			if inline(comparisonValue(x)) {
				return set, false, nil
			}
		case clause.Expr:
			f := fragmentOf(x.SQL)
			if !f.simple || f.params != len(x.Vars) {
				return set, false, nil
			}
			for _, v := range x.Vars {
				if inline(v) {
					return set, false, nil
				}
			}
			r := condReader{toks: f.toks, m: m, stmt: stmt, snap: snap, vars: x.Vars}
			if f.eq {
				// What expr reads `column = ?` as, without the walk
				// through OR, AND and NOT (see condReader.atom).
				if k := r.column(f.toks[:1]); k != 0 {
					got, err = r.values(k, f.toks[2:3])
				}
			} else {
				got, err = r.expr(0, len(f.toks))
			}
		default:
			return set, false, nil
		}
		if err != nil {
			return shardSet{}, true, err
		}
		set = set.and(got)
	}
	return set, true, nil
}

func comparisonValue(e clause.Expression) any {
	switch x := e.(type) {
	case clause.Neq:
		return x.Value
	case clause.Gt:
		return x.Value
	case clause.Gte:
		return x.Value
	case clause.Lt:
		return x.Value
	case clause.Lte:
		return x.Value
	case clause.Like:
		return x.Value
	}
	return nil
}

// inline reports values GORM writes into the SQL text instead of binding
// them: expressions, sub-queries, values that render themselves.
func inline(v any) bool {
	switch v.(type) {
	case clause.Expression, gorm.Valuer, *gorm.DB, clause.Column, clause.Table:
		return true
	}
	return false
}

// whereText builds a statement's WHERE clause as GORM will, on a
// throwaway statement and from a copy of what the build reorders: its
// text and bind variables. ok is false when GORM fails to build it (GORM
// reports that when it builds the statement).
func whereText(stmt *gorm.Statement, w clause.Where) (text string, vars []any, ok bool) {
	tmp := &gorm.DB{Config: stmt.DB.Config}
	s := &gorm.Statement{DB: tmp, Table: stmt.Table, TableExpr: stmt.TableExpr, Schema: stmt.Schema,
		Context: stmt.Context, Clauses: map[string]clause.Clause{}}
	tmp.Statement = s
	ownWhere(w).Build(s)
	return s.SQL.String(), s.Vars, tmp.Error == nil
}

// textShards builds the WHERE clause as GORM will and reads the text.
func (m *model) textShards(stmt *gorm.Statement, w clause.Where, snap *router.Snapshot) (shardSet, error) {
	text, vars, built := whereText(stmt, w)
	if !built {
		return shardSet{}, nil
	}
	toks, _, ok := sqlcond.Lex(text, false, nil)
	if !ok {
		return shardSet{}, nil
	}
	r := condReader{toks: toks, m: m, stmt: stmt, snap: snap, vars: vars}
	return r.expr(0, len(toks))
}

// fragment is a condition string as a caller wrote it, lexed once.
type fragment struct {
	toks   []sqlcond.Token
	params int
	simple bool // no AND/OR/NOT, no literals: one comparison
	eq     bool // exactly `column = ?`, the most common fragment
}

// fragments caches lexed condition strings; they are mostly literals in
// the program, so the cache stays small. It stops growing at maxCached.
var fragments = struct {
	sync.RWMutex
	m map[string]*fragment
}{m: map[string]*fragment{}}

const maxCached = 10000

func fragmentOf(sql string) *fragment {
	fragments.RLock()
	f, ok := fragments.m[sql]
	fragments.RUnlock()
	if ok {
		return f
	}
	f = &fragment{}
	toks, params, ok := sqlcond.Lex(sql, true, nil)
	if ok {
		f.toks, f.params, f.simple = toks, params, true
		for _, t := range toks {
			if t.Kind == sqlcond.String || t.Keyword("and") || t.Keyword("or") || t.Keyword("not") ||
				t.Keyword("between") || t.Keyword("case") || t.Keyword("select") {
				f.simple = false
				break
			}
		}
		f.eq = f.simple && len(toks) == 3 && toks[0].Kind == sqlcond.Ident && !sqlcond.IsReserved(toks[0]) &&
			toks[1].Kind == sqlcond.Op && toks[1].Text == "=" && toks[2].Kind == sqlcond.Param
	}
	fragments.Lock()
	if len(fragments.m) < maxCached {
		fragments.m[sql] = f
	}
	fragments.Unlock()
	return f
}

// column names a condition's column if it is the model's primary key or
// shard field, and returns that field's key kind (0: neither).
func (m *model) column(stmt *gorm.Statement, c any) keyKind {
	name, ok := m.columnName(stmt, c)
	if !ok {
		return 0
	}
	return m.columnKind(name)
}

// columnName returns the name of a condition's column of the model's own
// table.
func (m *model) columnName(stmt *gorm.Statement, c any) (string, bool) {
	var table, name string
	switch col := c.(type) {
	case string:
		table, name = splitColumn(col)
	case clause.Column:
		table, name = col.Table, col.Name
		if col.Raw {
			raw := col.Name
			if !strings.ContainsRune(raw, '"') {
				raw = strings.ToLower(raw) // Postgres folds unquoted names
			}
			table, name = splitColumn(raw)
		}
	default:
		return "", false
	}
	return name, m.ownTable(stmt, table)
}

func (m *model) ownTable(stmt *gorm.Statement, table string) bool {
	switch table {
	case "", clause.CurrentTable, m.table, stmt.Table:
		return true
	}
	return false
}

func (m *model) columnKind(name string) keyKind {
	switch name {
	case clause.PrimaryKey, m.pk.DBName:
		return keyID
	case m.key.DBName:
		return m.kind
	}
	return 0
}

// splitColumn splits a column as GORM writes a string column (t.c or c,
// each part quoted as written), or a raw one (Postgres folds unquoted
// names to lower case), into table and column.
func splitColumn(s string) (string, string) {
	if strings.ContainsAny(s, "\" ") {
		toks, _, ok := sqlcond.Lex(s, false, nil)
		switch {
		case !ok:
		case len(toks) == 1 && toks[0].Kind == sqlcond.Ident:
			return "", toks[0].Text
		case len(toks) == 3 && toks[0].Kind == sqlcond.Ident && toks[1].Kind == sqlcond.Dot && toks[2].Kind == sqlcond.Ident:
			return toks[0].Text, toks[2].Text
		}
		return "?", "" // matches no table
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if strings.IndexByte(s[i+1:], '.') >= 0 {
			return "?", ""
		}
		return s[:i], s[i+1:]
	}
	return "", s
}

// valueShards maps a value (or a slice of values, an IN list) of the
// shard field or the primary key to shards.
func valueShards(k keyKind, v any, snap *router.Snapshot) (shardSet, error) {
	if vs, ok := v.([]any); ok {
		return listShards(k, vs, snap)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() != reflect.Uint8 {
		list := make([]int, 0, rv.Len())
		for i := 0; i < rv.Len(); i++ {
			s, err := valueShards(k, rv.Index(i).Interface(), snap)
			if err != nil || !s.known {
				return s, err
			}
			list = append(list, s.list...)
		}
		return setOf(list), nil
	}
	return scalarShards(k, v, snap)
}

// listShards is valueShards of IN values: no reflection, and no boxing
// of the list.
func listShards(k keyKind, vs []any, snap *router.Snapshot) (shardSet, error) {
	if len(vs) == 1 {
		return valueShards(k, vs[0], snap)
	}
	list := make([]int, 0, len(vs))
	for _, e := range vs {
		s, err := valueShards(k, e, snap)
		if err != nil || !s.known {
			return s, err
		}
		list = append(list, s.list...)
	}
	return setOf(list), nil
}

// setOf sorts and de-duplicates a list of shards.
func setOf(list []int) shardSet {
	if len(list) == 1 {
		return one(list[0])
	}
	sort.Ints(list)
	return shardSet{known: true, list: slices.Compact(list)}
}

// scalarShards maps one value: an ID that names no shard of the map can
// match no row (none); a value that is no key (NULL, an expression) says
// nothing; a key value the map cannot place is an error.
func scalarShards(k keyKind, v any, snap *router.Snapshot) (shardSet, error) {
	if dv, ok := v.(driver.Valuer); ok {
		x, err := dv.Value()
		if err != nil {
			return shardSet{}, nil
		}
		v = x
	}
	if v == nil {
		return shardSet{}, nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Ptr {
		if rv.IsNil() {
			return shardSet{}, nil
		}
		v = rv.Elem().Interface()
	}
	if k == keyString {
		s, ok := v.(string)
		if !ok {
			return shardSet{}, fmt.Errorf("%w: shard key value %v (%T) is not a string", ErrUnroutableSQL, v, v)
		}
		n, err := router.ShardOfString(s, snap.Shards)
		if err != nil {
			return shardSet{}, err
		}
		return one(n), nil
	}
	n, err := toInt64(v)
	if err != nil {
		return shardSet{}, err
	}
	if k == keyID {
		s, err := shardOfID(n, snap)
		if err != nil {
			return none, nil // no row has this ID
		}
		return one(s), nil
	}
	s, err := router.ShardOfKey(n, snap.Shards)
	if err != nil {
		return shardSet{}, err
	}
	return one(s), nil
}
