package plugin

import (
	"reflect"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
)

// A read of many shards sends one statement per server (per batch of at
// most unionBatch of a server's shards): the per-shard SELECT, with its
// WHERE, ORDER BY and LIMIT, once per schema, joined by UNION ALL, under
// the same ORDER BY and LIMIT. Postgres merges the ordered branches
// itself (Merge Append) and stops at the limit; the plugin then merges
// the servers' answers. Every branch shares the statement's bind
// variables, and a given shard set always gives the same text, so the
// statement is prepared once per connection like any other.

// unionBatch is the most shards one statement reads. A server's prepared
// statement is planned once per connection; after that, larger batches
// save round trips and rows (each batch returns up to LIMIT+OFFSET rows to
// merge) until the statement's own size dominates: of 25, 100 and 500
// measured (README → Performance), 100 was fastest for ordered reads and
// counts alike.
const unionBatch = 100

// unionShards is the batch in use: the benchmarks set it to 1 to measure
// one statement per shard against it.
var unionShards = unionBatch

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

// unionSQL builds the one-statement read of the shards d.shards[idx]:
// it builds the first shard's SELECT with GORM, then repeats it for the
// other schemas. It returns false, with the statement untouched but for
// its built SQL, when the text cannot be repeated safely (a literal that
// might hold the table name, or no table name to replace).
func (p *Plugin) unionSQL(db *gorm.DB, d *decision, idx []int, keys []orderKey, limit int, count bool) bool {
	stmt := db.Statement
	callbacks.BuildQuerySQL(db)
	if db.Error != nil {
		return false
	}
	branch := stmt.SQL.String()
	first := d.m.quoted[d.shards[idx[0]]]
	if strings.Contains(branch, "'") || strings.Contains(branch, "$$") || !strings.Contains(branch, first) {
		return false
	}
	pieces := strings.Split(branch, first)
	var b strings.Builder
	b.Grow((len(branch) + 16) * len(idx))
	if count {
		b.WriteString("SELECT COALESCE(sum(n), 0)::bigint FROM (")
	}
	for j, i := range idx {
		if j > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteByte('(')
		name := d.m.quoted[d.shards[i]]
		for k, piece := range pieces {
			if k > 0 {
				b.WriteString(name)
			}
			b.WriteString(piece)
		}
		b.WriteByte(')')
	}
	if count {
		b.WriteString(") AS u(n)")
	} else {
		for j, k := range keys {
			if j == 0 {
				b.WriteString(" ORDER BY ")
			} else {
				b.WriteString(", ")
			}
			stmt.DB.Dialector.QuoteTo(&b, k.name)
			if k.desc {
				b.WriteString(" DESC")
			}
		}
		if limit >= 0 {
			b.WriteString(" LIMIT ")
			b.WriteString(strconv.Itoa(limit))
		}
	}
	stmt.SQL.Reset()
	stmt.SQL.WriteString(b.String())
	return true
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
