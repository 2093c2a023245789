package plugin

import (
	"reflect"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// shardSet is a set of logical shards a statement is constrained to.
type shardSet struct {
	known bool  // some condition constrains the shard
	all   bool  // every shard (AllShards)
	list  []int // sorted, unique; empty with known && !all: nothing matches
}

// singles backs the one-shard lists, so that routing to one shard does
// not allocate. Lists are never written in place (add copies on growth).
var singles = func() []int {
	s := make([]int, 1<<14)
	for i := range s {
		s[i] = i
	}
	return s
}()

func one(s int) shardSet {
	if s >= 0 && s < len(singles) {
		return shardSet{known: true, list: singles[s : s+1 : s+1]}
	}
	return shardSet{known: true, list: []int{s}}
}

// and intersects two constraints.
func (a shardSet) and(b shardSet) shardSet {
	switch {
	case !a.known || a.all:
		if a.all && !b.known {
			return a
		}
		return b
	case !b.known || b.all:
		return a
	}
	if len(a.list) == 1 && len(b.list) == 1 {
		if a.list[0] == b.list[0] {
			return a
		}
		return shardSet{known: true}
	}
	var out []int
	for _, x := range a.list {
		for _, y := range b.list {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return shardSet{known: true, list: out}
}

// add inserts a shard into a sorted list.
func add(list []int, s int) []int {
	if len(list) == 0 {
		return one(s).list
	}
	for i, x := range list {
		if x == s {
			return list
		}
		if x > s {
			list = append(list, 0)
			copy(list[i+1:], list[i:])
			list[i] = s
			return list
		}
	}
	return append(list, s)
}

// column names a condition's column if it is the model's primary key or
// shard field, and returns that field's key kind (0: neither).
func (m *model) column(stmt *gorm.Statement, c any) keyKind {
	var table, name string
	switch col := c.(type) {
	case string:
		table, name = splitColumn(col)
	case clause.Column:
		table, name = col.Table, col.Name
		if col.Raw {
			table, name = splitColumn(col.Name)
		}
	default:
		return 0
	}
	switch table {
	case "", clause.CurrentTable, m.table, stmt.Table:
	default:
		return 0
	}
	switch name {
	case clause.PrimaryKey, m.pk.DBName:
		return keyID
	case m.key.DBName:
		return m.kind
	}
	return 0
}

// splitColumn splits `"t"."c"`, t.c or c into table and column.
func splitColumn(s string) (string, string) {
	s = strings.TrimSpace(s)
	table := ""
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		table, s = strings.Trim(s[:i], `"`), s[i+1:]
	}
	return table, strings.Trim(s, `"`)
}

// valuesShards maps the values of an IN list (or one value) to shards.
func valuesShards(k keyKind, v any, snap *router.Snapshot) (shardSet, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() != reflect.Uint8 {
		set := shardSet{known: true}
		for i := 0; i < rv.Len(); i++ {
			s, err := shardOfValue(k, rv.Index(i).Interface(), snap)
			if err != nil {
				return shardSet{}, err
			}
			set.list = add(set.list, s)
		}
		return set, nil
	}
	s, err := shardOfValue(k, v, snap)
	if err != nil {
		return shardSet{}, err
	}
	return one(s), nil
}

// exprShards reads shard constraints from AND-ed WHERE expressions:
// equality and IN on the primary key or the shard field, in struct, map
// or string conditions. Conditions it cannot read only narrow the rows,
// so skipping them is safe; an OR at the top of a string condition makes
// the whole condition unreadable.
func (m *model) exprShards(stmt *gorm.Statement, exprs []clause.Expression, snap *router.Snapshot) (shardSet, error) {
	var set shardSet
	for _, e := range exprs {
		var got shardSet
		var err error
		switch x := e.(type) {
		case clause.Eq:
			if k := m.column(stmt, x.Column); k != 0 {
				got, err = valuesShards(k, x.Value, snap)
			}
		case clause.IN:
			if k := m.column(stmt, x.Column); k != 0 {
				got = shardSet{known: true}
				for _, v := range x.Values {
					var s shardSet
					if s, err = valuesShards(k, v, snap); err != nil {
						break
					}
					for _, n := range s.list {
						got.list = add(got.list, n)
					}
				}
			}
		case clause.Expr:
			got, err = m.sqlShards(stmt, x.SQL, x.Vars, snap)
		case clause.AndConditions:
			got, err = m.exprShards(stmt, x.Exprs, snap)
		}
		if err != nil {
			return shardSet{}, err
		}
		set = set.and(got)
	}
	return set, nil
}

// sqlCond is one `column = ?` or `column IN ?` conjunct of a string condition.
type sqlCond struct {
	column string
	arg    int // index into the condition's vars
	in     bool
}

// sqlCache holds parsed string conditions; they are mostly literals in
// the program, so the cache stays small. It stops growing at maxCached.
var sqlCache = struct {
	sync.RWMutex
	m map[string][]sqlCond
}{m: map[string][]sqlCond{}}

const maxCached = 10000

func (m *model) sqlShards(stmt *gorm.Statement, sql string, vars []any, snap *router.Snapshot) (shardSet, error) {
	var conds []sqlCond
	sqlCache.RLock()
	conds, ok := sqlCache.m[sql]
	sqlCache.RUnlock()
	if !ok {
		conds = parseConds(sql)
		sqlCache.Lock()
		if len(sqlCache.m) < maxCached {
			sqlCache.m[sql] = conds
		}
		sqlCache.Unlock()
	}
	var set shardSet
	for _, c := range conds {
		k := m.column(stmt, c.column)
		if k == 0 || c.arg >= len(vars) {
			continue
		}
		got, err := valuesShards(k, vars[c.arg], snap)
		if err != nil {
			return shardSet{}, err
		}
		set = set.and(got)
	}
	return set, nil
}

// parseConds finds `col = ?`, `col IN ?` and `col IN (?)` conjuncts at the
// top level of an AND-only condition. It returns nil when the condition has
// a top-level OR, or none of those conjuncts.
func parseConds(sql string) []sqlCond {
	var conds []sqlCond
	depth, args, start := 0, 0, 0
	inQuote := byte(0)
	startArg := 0
	flush := func(end int) {
		if c, ok := parseConjunct(sql[start:end]); ok {
			c.arg = startArg
			conds = append(conds, c)
		}
	}
	for i := 0; i < len(sql); i++ {
		ch := sql[i]
		if inQuote != 0 {
			if ch == inQuote {
				inQuote = 0
			}
			continue
		}
		switch ch {
		case '\'', '"':
			inQuote = ch
		case '(':
			depth++
		case ')':
			depth--
		case '?':
			args++
		case ' ', '\t', '\n':
			if depth != 0 {
				continue
			}
			if word(sql, i+1, "or") {
				return nil
			}
			if word(sql, i+1, "and") {
				flush(i)
				start = i + 4
				startArg = args
				i += 3
			}
		}
	}
	flush(len(sql))
	return conds
}

// word reports whether sql has the keyword w at i, followed by a space.
func word(sql string, i int, w string) bool {
	if i+len(w) >= len(sql) || !strings.EqualFold(sql[i:i+len(w)], w) {
		return false
	}
	c := sql[i+len(w)]
	return c == ' ' || c == '\t' || c == '\n' || c == '('
}

func parseConjunct(s string) (sqlCond, bool) {
	s = strings.TrimSpace(s)
	n := len(s)
	var col string
	var in bool
	switch {
	case n > 5 && strings.EqualFold(s[n-5:], " in ?"):
		col, in = s[:n-5], true
	case n > 7 && strings.EqualFold(s[n-7:], " in (?)"):
		col, in = s[:n-7], true
	case strings.HasSuffix(s, "=?"):
		col = s[:n-2]
	case strings.HasSuffix(s, "= ?"):
		col = s[:n-3]
	default:
		return sqlCond{}, false
	}
	col = strings.TrimSpace(col)
	if col == "" || strings.ContainsAny(col, " ()?'!<>=") {
		return sqlCond{}, false
	}
	return sqlCond{column: col, in: in}, true
}
