package plugin

import (
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/sqlcond"
)

// A read of many shards sends one statement per server (per batch of at
// most unionBatch of a server's shards): the per-shard SELECT with its
// WHERE, once per schema, joined by UNION ALL, under the read's ORDER BY
// and LIMIT+OFFSET. Postgres folds the branches into one append of the
// tables, merges them itself in order (Merge Append over each table's
// index) and stops at the limit; the plugin then merges the servers'
// answers. Every branch shares the statement's bind
// variables, and a given shard set always gives the same text, so the
// statement is prepared once per connection like any other.

// unionBatch is the most shards one statement reads. A server plans a
// prepared statement once per connection; after that, larger batches save
// round trips and rows (each batch returns up to LIMIT+OFFSET rows to
// merge) until the statement's own size dominates: Postgres plans a
// statement of n tables in time that grows faster than n, which the
// first read of a statement text on each connection pays. 100 is where
// the warm saving of a larger batch stops paying for that (the figures
// and their commands: README → Performance).
const unionBatch = 100

// foldGroup is the most branches Postgres folds into one append. The
// executor runs a folded branch for less CPU than a branch planned as a
// subquery of its own, but Postgres plans one append of n tables in time
// that grows faster than n, so a statement folds its branches in groups,
// each ordered and limited (or counted) on its own, and merges the
// groups: planned in about the time of the subqueries, run in the time
// of the folded tables (EXPLAIN (SUMMARY) and pgbench figures: README →
// Performance).
const foldGroup = 25

// units splits a decision's shards into groups of one server each, at
// most batch shards per group, in plan order.
func (d *decision) units(batch int) [][]int {
	byServer := map[string]int{}
	var units [][]int
	for i, pl := range d.places {
		u, ok := byServer[pl.Server]
		if !ok || len(units[u]) >= batch {
			u = len(units)
			units = append(units, nil)
			byServer[pl.Server] = u
		}
		units[u] = append(units[u], i)
	}
	return units
}

// unionSQL returns the one-statement read of the shards d.shards[idx]:
// it builds the first shard's SELECT with GORM, then repeats it for the
// other schemas. It returns false, with the statement untouched but for
// its built SQL, when the text cannot be repeated safely (a literal that
// might hold the table name, or no table name to replace).
//
// For a read of rows or a count (not an aggregate's partials), the
// branches are plain per-schema SELECTs that the statement orders and
// limits (or counts) as a whole, in groups of foldGroup: Postgres folds
// a group's branches into one append of the tables (for an ORDER BY, a
// Merge Append straight over each table's index) and runs no Limit, Sort
// or Aggregate per branch; the groups keep planning time growing with
// the branches instead of faster (see foldGroup). An aggregate's
// branches are each the shard's whole statement.
//
// The text comes from p.unions when a read of the same shape and shards
// wrote it before; else it is written into the statement's SQL and kept.
func (p *Plugin) unionSQL(db *gorm.DB, rp *readPlan, idx []int) (string, bool) {
	stmt := db.Statement
	u := union{keys: rp.keys, limit: rp.pushed, count: rp.shape == shapeCount, q: stmt.DB.Dialector}
	u.fold = rp.shape != shapeAggregate && (!u.count || countsRows(stmt))
	var cols []string
	if rp.shape == shapeRows {
		cols = modelColumns(stmt, rp.d.m)
	}
	var cast map[string]bool
	if rp.d.m.perSchemaTypes() {
		// Postgres unions no two schemas' values of a type each defines:
		// the branches select such columns as text (what the driver gives
		// for them anyway), which only a select list of the model's
		// columns can say; any other read runs one shard at a time.
		if cols == nil || u.count {
			return "", false
		}
		cast = rp.d.m.perSchemaColumns()
	}
	branch, ok := buildBranch(db, u.fold, u.count, cols, cast)
	first := rp.d.m.quoted[rp.d.shards[idx[0]]]
	if !ok || strings.Contains(branch, "'") || strings.Contains(branch, "$$") || !strings.Contains(branch, first) {
		return "", false
	}
	key := u.key(branch)
	if text, ok := p.unions.get(key, rp.d, idx); ok {
		return text, true
	}
	u.pieces = strings.Split(branch, first)
	u.names = make([]string, len(idx))
	for j, i := range idx {
		u.names[j] = rp.d.m.quoted[rp.d.shards[i]]
	}
	// The statement is written straight into the statement's builder
	// (the branch's text stays valid: Reset drops the buffer, it does not
	// overwrite it), so each statement's text is allocated once.
	stmt.SQL.Reset()
	stmt.SQL.Grow((len(branch) + 16) * len(idx))
	u.b = &stmt.SQL
	u.write()
	text := stmt.SQL.String()
	p.unions.put(key, u.names, text)
	return text, true
}

// unionTexts keeps the texts of recent statements of reads across
// shards. A read of 2000 shards renders 20 statements of about 15 KB;
// the same read again (an application has a few shapes of read across
// shards, run many times) takes them from here instead of writing and
// allocating them anew, and pgx finds its prepared statement by the same
// string. A text is a function of its key (the branch GORM built for the
// unit's first schema, whether the branches fold or count, the ORDER BY
// and LIMIT) and the unit's schemas alone, and a hit compares both, so
// it is exact. The cache empties itself when it would hold more than
// maxUnionBytes.
type unionTexts struct {
	mu    sync.Mutex
	m     map[string]unionText
	bytes int
}

// unionText is one statement's text and the schemas it reads, in order.
type unionText struct {
	names []string
	text  string
}

// maxUnionBytes bounds the texts a plugin keeps: about 500 statements
// of 100 shards, 25 shapes of read of 2000 shards.
const maxUnionBytes = 8 << 20

// get returns the text kept for key if it reads the schemas of
// d.shards[idx], in that order.
func (c *unionTexts) get(key string, d *decision, idx []int) (string, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok || len(e.names) != len(idx) {
		return "", false
	}
	for j, i := range idx {
		if e.names[j] != d.m.quoted[d.shards[i]] {
			return "", false
		}
	}
	return e.text, true
}

// put keeps text for key and names (which it owns from then on).
func (c *unionTexts) put(key string, names []string, text string) {
	e := unionText{names: names, text: text}
	size := e.size(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; ok {
		c.bytes -= old.size(key)
	}
	if c.m == nil || c.bytes+size > maxUnionBytes {
		c.m, c.bytes = map[string]unionText{}, 0
	}
	c.m[key] = e
	c.bytes += size
}

// size is what the entry kept under key counts against maxUnionBytes:
// its key, its text and a string header per schema name (the names
// themselves are the model's, shared).
func (e unionText) size(key string) int {
	return len(key) + len(e.text) + 16*len(e.names)
}

// buildBranch builds the statement's SELECT with GORM, as one shard
// would run it. A folded read's branch has no ORDER BY and LIMIT (the
// union applies them), and a folded count's branch selects 1; a branch
// given cols selects them instead of *. The clauses come back for a
// statement that falls back to one shard at a time.
func buildBranch(db *gorm.DB, fold, count bool, cols []string, cast map[string]bool) (string, bool) {
	stmt := db.Statement
	if fold || cols != nil {
		saved := maps.Clone(stmt.Clauses)
		defer func() { stmt.Clauses = saved }()
		stmt.Clauses = maps.Clone(saved)
	}
	if fold {
		delete(stmt.Clauses, "ORDER BY")
		delete(stmt.Clauses, "LIMIT")
		if count {
			one := stmt.Clauses["SELECT"]
			one.Expression = clause.Expr{SQL: "1"}
			stmt.Clauses["SELECT"] = one
		}
	}
	if cols != nil {
		sel := clause.Select{Distinct: stmt.Distinct, Columns: make([]clause.Column, len(cols))}
		for i, c := range cols {
			sel.Columns[i] = clause.Column{Name: c}
			if cast[c] {
				q := sqlcond.QuoteIdent(c)
				sel.Columns[i] = clause.Column{Name: q + "::text AS " + q, Raw: true}
			}
		}
		stmt.Clauses["SELECT"] = clause.Clause{Name: "SELECT", Expression: sel}
	}
	callbacks.BuildQuerySQL(db)
	return stmt.SQL.String(), db.Error == nil
}

// modelColumns returns the model's columns for a read of rows into the
// model's own struct that would select *, nil for any other read. Its
// union names them, so that the read does not depend on every branch's
// table having the same columns: shards part-way through a schema change
// (a column added on some, not yet on others) read as one, and a column
// the model does not know is not read, as GORM would not scan it.
func modelColumns(stmt *gorm.Statement, m *model) []string {
	if len(stmt.Selects) > 0 || len(stmt.Omits) > 0 {
		return nil
	}
	if _, ok := stmt.Clauses["SELECT"]; ok {
		return nil
	}
	t := stmt.ReflectValue.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != m.schema.ModelType {
		return nil
	}
	return m.schema.DBNames
}

// union writes the text of a one-statement read of several schemas.
type union struct {
	b      *strings.Builder
	pieces []string // the branch's text around the first schema's name
	names  []string // the quoted schema of each branch
	keys   []orderKey
	limit  int // -1: none
	count  bool
	fold   bool
	q      interface{ QuoteTo(clause.Writer, string) }
}

// write writes the whole statement: one group of branches, or the groups
// of foldGroup, each ordered and limited (or counted), under the read's
// ORDER BY and LIMIT (or the sum of the groups' counts).
func (u *union) write() {
	if u.fold && len(u.names) <= foldGroup { // one group: the statement is the group
		if u.count {
			u.b.WriteString("SELECT count(*) FROM (")
			u.branches(u.names)
			u.b.WriteString(") AS g")
		} else {
			u.branches(u.names)
			u.orderLimit()
		}
		return
	}
	if u.count {
		u.b.WriteString("SELECT COALESCE(sum(n), 0)::bigint FROM (")
	}
	if !u.fold {
		u.branches(u.names)
	}
	for g := 0; u.fold && g < len(u.names); g += foldGroup {
		if g > 0 {
			u.b.WriteString(" UNION ALL ")
		}
		if u.count {
			u.b.WriteString("(SELECT count(*) FROM (")
		} else {
			u.b.WriteString("(SELECT * FROM (")
		}
		u.branches(u.names[g:min(g+foldGroup, len(u.names))])
		u.b.WriteString(") AS g")
		switch {
		case u.count:
		case len(u.keys) == 0 && u.limit < 0:
			u.b.WriteString(" OFFSET 0") // kept a group of its own: not folded into the statement's append
		default:
			u.orderLimit()
		}
		u.b.WriteByte(')')
	}
	if u.count {
		u.b.WriteString(") AS u(n)")
	} else {
		u.orderLimit()
	}
}

// branches writes the branch once per schema, joined by UNION ALL.
func (u *union) branches(names []string) {
	for j, name := range names {
		if j > 0 {
			u.b.WriteString(" UNION ALL ")
		}
		u.b.WriteByte('(')
		for k, piece := range u.pieces {
			if k > 0 {
				u.b.WriteString(name)
			}
			u.b.WriteString(piece)
		}
		u.b.WriteByte(')')
	}
}

// orderLimit writes the read's ORDER BY and its LIMIT+OFFSET.
func (u *union) orderLimit() {
	for j, k := range u.keys {
		if j == 0 {
			u.b.WriteString(" ORDER BY ")
		} else {
			u.b.WriteString(", ")
		}
		if k.hidden {
			u.q.QuoteTo(u.b, k.alias)
		} else {
			u.q.QuoteTo(u.b, k.name)
		}
		if k.desc {
			u.b.WriteString(" DESC")
		}
		u.b.WriteString(k.nullsSQL())
	}
	if u.limit >= 0 {
		u.b.WriteString(" LIMIT ")
		u.b.WriteString(strconv.Itoa(u.limit))
	}
}

// key is what a statement's text depends on besides its schemas: the
// branch, whether the branches fold and count, and the ORDER BY and
// LIMIT the statement writes.
func (u *union) key(branch string) string {
	var b strings.Builder
	b.Grow(len(branch) + 64)
	b.WriteString(branch)
	b.WriteByte(0)
	flags := byte('0')
	if u.fold {
		flags |= 1
	}
	if u.count {
		flags |= 2
	}
	b.WriteByte(flags)
	k := *u
	k.b = &b
	k.orderLimit()
	return b.String()
}

// countsRows reports whether a count reads count(*) of every row the
// WHERE finds, as Count builds it with no Select: no LIMIT or OFFSET
// (which apply to the count's one row) and no column (count(col) leaves
// out NULLs).
func countsRows(stmt *gorm.Statement) bool {
	if _, limited := stmt.Clauses["LIMIT"]; limited || len(stmt.Selects) > 0 {
		return false
	}
	e, ok := stmt.Clauses["SELECT"].Expression.(clause.Expr)
	return ok && len(e.Vars) == 0 && strings.EqualFold(strings.ReplaceAll(e.SQL, " ", ""), "count(*)")
}

// literalLimit is the LIMIT each shard of a multi-shard read gets
// (the page's LIMIT plus OFFSET; none when negative), written as a
// number, not a bind variable. Postgres plans a prepared statement with
// no bind variables once per connection and reuses the plan; with a
// LIMIT $n it plans the first executions anew for each value (for a
// UNION ALL of many schemas that costs more than running it) and then
// falls back to a generic plan that does not know the limit.
type literalLimit int

// Build is part of clause.Expression.
func (l literalLimit) Build(b clause.Builder) {
	if l >= 0 {
		b.WriteString("LIMIT ")
		b.WriteString(strconv.Itoa(int(l)))
	}
}

// unionable reports whether a multi-shard read may be sent as UNION ALL:
// not with joins (they resolve per shard through search_path) nor with a
// locking clause (Postgres refuses FOR UPDATE with UNION).
func unionable(stmt *gorm.Statement) bool {
	if len(stmt.Joins) > 0 {
		return false
	}
	_, locking := stmt.Clauses["FOR"]
	return !locking
}

// appendRows appends the rows of a slice value to acc.
func appendRows(acc, part reflect.Value) reflect.Value {
	if !acc.IsValid() {
		return part
	}
	return reflect.AppendSlice(acc, part)
}
