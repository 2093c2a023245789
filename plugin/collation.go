package plugin

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardkit/shardkit/router"
)

// The plugin merges rows of several shards in Go. Integers, times and the
// like order the same there as in Postgres; text does only under the C
// (byte-order) collation. So at start-up the plugin reads, on each server,
// the collation every text column of the registered tables orders by
// (its own, or the database's default), and a merge that would order
// text of another collation (ORDER BY a text column, min/max of text
// across shards) is refused instead of answered in the wrong order.

// textCollationsSQL reads each column's type and each text column's
// collation: the name it is known by (the database's locale for the
// default one: its ICU locale where the database's provider is ICU), and
// the schema and name a COLLATE clause names it by ("" for the database
// default). pg_database's provider columns differ by version
// (datlocprovider and daticulocale from 15, datlocale from 17): they are
// read from the row as JSON, which has the columns the server has.
const textCollationsSQL = `WITH db AS (
    SELECT CASE to_jsonb(d) ->> 'datlocprovider'
        WHEN 'i' THEN 'icu:' || COALESCE(to_jsonb(d) ->> 'datlocale', to_jsonb(d) ->> 'daticulocale')
        WHEN 'b' THEN COALESCE(to_jsonb(d) ->> 'datlocale', d.datcollate)
        ELSE d.datcollate END AS locale
    FROM pg_database d WHERE d.datname = current_database())
SELECT c.relname, a.attname,
    CASE WHEN co.collname IS NULL OR co.collname = 'default' THEN db.locale ELSE co.collname END,
    CASE WHEN co.collname IS NULL OR co.collname = 'default' THEN '' ELSE cn.nspname END,
    CASE WHEN co.collname IS NULL OR co.collname = 'default' THEN '' ELSE co.collname END,
    a.attcollation <> 0, COALESCE(co.collisdeterministic, true), NOT a.attnotnull,
    format_type(a.atttypid, a.atttypmod), COALESCE(bt.typname, t.typname),
    COALESCE(bt.typtype, t.typtype)::text, COALESCE(bt.typcategory, t.typcategory)::text,
    t.typnamespace = n.oid OR COALESCE(bt.typnamespace = n.oid, false)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
CROSS JOIN db
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
WHERE c.relname = ANY($2::text[]) AND a.attnum > 0 AND NOT a.attisdropped`

// collation is a text column's collation on a server.
type collation struct {
	name   string // as Postgres names it: the collation, or the database's locale
	schema string // the COLLATE clause's schema and name; "" for the database default
	coll   string
	// mixed: the servers do not agree on it (a merge cannot follow one
	// order)
	mixed bool
	// nondeterministic: values that differ as bytes may be equal (a
	// case- or accent-insensitive ICU collation)
	nondeterministic bool
}

// byteOrder reports whether the collation orders text as bytes do.
func (c collation) byteOrder() bool { return !c.mixed && !c.nondeterministic && byteOrdered(c.name) }

// same reports whether two servers' collations order text alike.
func (c collation) same(o collation) bool {
	return c.name == o.name && c.schema == o.schema && c.coll == o.coll
}

// byteCollation is the collation of Go's byte order, named for a
// statement that orders or compares text in Postgres: without it, text
// there takes the database's default collation, whatever its column's.
var byteCollation = collation{name: "C", schema: "pg_catalog", coll: "C"}

// collatable reports whether values of a driver type name (TEXT, or the
// array type an argument is sent as, text) take a COLLATE clause: of the
// types the merge reads as text, uuid does not.
func collatable(dbType string) bool {
	switch strings.ToLower(dbType) {
	case "text", "varchar", "name":
		return true
	}
	return false
}

// byteOrdered reports whether a collation orders text as bytes do.
func byteOrdered(collation string) bool {
	switch strings.ToLower(collation) {
	case "c", "posix", "ucs_basic":
		return true
	}
	return false
}

// collations is what the plugin knows of the registered tables' text
// collations, per server. A server read once is not read again (its
// shards hold the same per-shard SQL; a shard moved onto a server the
// plugin has not read, or a server that did not answer at start-up, is
// read when a merge first needs it). While a server with shards stays
// unread, merges that order text are refused: the plugin does not guess.
type collations struct {
	mu    sync.Mutex
	read  map[string]bool      // servers read
	tried map[string]time.Time // last failed read of a server
	byCol atomic.Pointer[map[string]map[string]collation]
	// def: the database's default collation, as the servers read give
	// it (mixed where they differ); nil before a server is read
	def atomic.Pointer[collation]
	// types: every registered column's type, as byCol (read_plan_coltype.go)
	types  atomic.Pointer[map[string]map[string]colType]
	tables []string
	// complete is the newest map version whose every server with shards
	// has been read: merges under it need no check.
	complete atomic.Int64
}

// readCollations reads the collations of every server of snap not read
// yet, and records per registered model the collation of each text
// column (collations.byCol), marked mixed where servers differ. A server
// that does not answer is tried again at most once per Config.ServerRetry.
func (p *Plugin) readCollations(ctx context.Context, snap *router.Snapshot) {
	if ctx == nil {
		ctx = context.Background()
	}
	c := &p.coll
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read == nil {
		c.read, c.tried = map[string]bool{}, map[string]time.Time{}
		for t := range p.byTable {
			c.tables = append(c.tables, t)
		}
		empty := map[string]map[string]collation{}
		c.byCol.Store(&empty)
		noTypes := map[string]map[string]colType{}
		c.types.Store(&noTypes)
	}
	next, copied := *c.byCol.Load(), false
	nextTypes := cloneColTypes(*c.types.Load())
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		if len(shards) == 0 || c.read[srv.Name] || time.Since(c.tried[srv.Name]) < p.cfg.ServerRetry {
			continue
		}
		found, types, err := p.readServerCollations(ctx, snap, srv.Name, router.SchemaName(shards[0]), c.tables)
		if err != nil {
			c.tried[srv.Name] = time.Now()
			continue
		}
		c.read[srv.Name] = true
		if d, ok := dbDefault(found); ok {
			if had := c.def.Load(); had != nil && !had.same(d) {
				d = *had
				d.mixed = true
			}
			c.def.Store(&d)
		}
		for table, cols := range types {
			if nextTypes[table] == nil {
				nextTypes[table] = map[string]colType{}
			}
			for col, ct := range cols {
				if had, ok := nextTypes[table][col]; ok && !had.same(ct) {
					ct = had
					ct.mixed = true
				} else if ok {
					ct.nullable = ct.nullable || had.nullable
				}
				nextTypes[table][col] = ct
			}
		}
		for table, cols := range found {
			if len(cols) == 0 {
				continue
			}
			if !copied { // readers hold the old map: change a copy
				next, copied = copyColl(next), true
			}
			if next[table] == nil {
				next[table] = map[string]collation{}
			}
			for col, coll := range cols {
				if had, ok := next[table][col]; ok && !had.same(coll) {
					coll = had
					coll.mixed = true
				}
				next[table][col] = coll
			}
		}
	}
	c.byCol.Store(&next)
	c.types.Store(&nextTypes)
}

func cloneColTypes(m map[string]map[string]colType) map[string]map[string]colType {
	out := make(map[string]map[string]colType, len(m))
	for t, cols := range m {
		out[t] = maps.Clone(cols)
	}
	return out
}

func copyColl(m map[string]map[string]collation) map[string]map[string]collation {
	out := make(map[string]map[string]collation, len(m))
	for t, cols := range m {
		out[t] = maps.Clone(cols)
	}
	return out
}

// readServerCollations reads, on one server, the collation of every text
// column of the given tables in one shard's schema, and every column's
// type, by table.
func (p *Plugin) readServerCollations(ctx context.Context, snap *router.Snapshot, server, schema string, tables []string) (map[string]map[string]collation, map[string]map[string]colType, error) {
	db, err := p.pools.get(snap, server)
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, tableCheckTimeout)
	defer cancel()
	rows, err := db.QueryContext(cctx, textCollationsSQL, schema, tables)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	found := map[string]map[string]collation{}
	types := map[string]map[string]colType{}
	var def string
	for rows.Next() {
		var table, column, typtype, category string
		var c collation
		var ct colType
		var collatable, deterministic bool
		if err := rows.Scan(&table, &column, &c.name, &c.schema, &c.coll, &collatable, &deterministic, &ct.nullable,
			&ct.cast, &ct.base, &typtype, &category, &ct.perSchema); err != nil {
			return nil, nil, err
		}
		if len(typtype) > 0 && len(category) > 0 {
			ct.typtype, ct.category = typtype[0], category[0]
		}
		if types[table] == nil {
			types[table] = map[string]colType{}
		}
		types[table][column] = ct
		if !collatable {
			def = c.name // a column of no collation is given the default's name
			continue
		}
		c.nondeterministic = !deterministic
		if found[table] == nil {
			found[table] = map[string]collation{}
		}
		found[table][column] = c
	}
	if def != "" {
		if found[""] == nil {
			found[""] = map[string]collation{}
		}
		found[""][""] = collation{name: def}
	}
	return found, types, rows.Err()
}

// dbDefault takes the database's default collation out of what
// readServerCollations found: kept under table "" (never a table's name),
// else that of a text column of the default collation.
func dbDefault(found map[string]map[string]collation) (collation, bool) {
	if d, ok := found[""][""]; ok {
		delete(found, "")
		return d, true
	}
	for _, cols := range found {
		for _, c := range cols {
			if c.coll == "" {
				return collation{name: c.name}, true
			}
		}
	}
	return collation{}, false
}

// unreadCollations returns the servers holding shards whose collations
// the plugin could not read, after trying them again (see collations).
func (p *Plugin) unreadCollations(ctx context.Context) []string {
	snap := p.router.Snapshot()
	if p.coll.complete.Load() == snap.Version {
		return nil
	}
	missing := func() []string {
		p.coll.mu.Lock()
		defer p.coll.mu.Unlock()
		var out []string
		for _, srv := range snap.Servers() {
			if len(snap.ShardsOn(srv.Name)) > 0 && !p.coll.read[srv.Name] {
				out = append(out, srv.Name)
			}
		}
		if len(out) == 0 {
			p.coll.complete.Store(snap.Version)
		}
		return out
	}
	if len(missing()) == 0 {
		return nil
	}
	p.readCollations(ctx, snap)
	return missing()
}

// textOrder returns the collation the rows of several shards merge in
// when ordered by column: nil where Go's byte order is Postgres's (not
// text, or text in a byte-order collation on every server). It refuses a
// column whose collation is not known (a server did not answer) or that
// the servers do not agree on.
func (m *model) textOrder(ctx context.Context, column string) (*collation, error) {
	if f := m.schema.LookUpField(column); f != nil && f.DBName == column && f.IndirectFieldType.Kind() != reflect.String {
		return nil, nil // not text
	}
	if unread := m.p.unreadCollations(ctx); len(unread) > 0 {
		return nil, fmt.Errorf("%w: ordering column %s across shards: the collation of %s's text columns on server %s is not known (it did not answer); "+
			"order by a non-text column, scope the query to one shard, or retry when the server answers",
			ErrUnroutableSQL, column, m.table, strings.Join(unread, ", "))
	}
	c, ok := (*m.p.coll.byCol.Load())[m.table][column]
	switch {
	case !ok || c.byteOrder():
		return nil, nil
	case c.mixed:
		return nil, fmt.Errorf("%w: ordering text column %s across shards: the servers give it different collations, so no one order holds for all its rows; "+
			"give the column the same collation on every server, or scope the query to one shard", ErrUnroutableSQL, column)
	}
	return &c, nil
}

// anyTextCollation describes a text column of the model whose collation
// is not byte order, or the servers whose collations are not known; ""
// when text merges in byte order are right.
//
// joined are the tables the read joins to the model's: their text counts
// too, since an expression may read it.
func (m *model) anyTextCollation(ctx context.Context, joined ...string) string {
	if unread := m.p.unreadCollations(ctx); len(unread) > 0 {
		return fmt.Sprintf("(collation unknown: server %s did not answer)", strings.Join(unread, ", "))
	}
	byCol := *m.p.coll.byCol.Load()
	for _, t := range append([]string{m.table}, joined...) {
		for col, c := range byCol[t] {
			if !c.byteOrder() {
				if t != m.table {
					col = t + "." + col
				}
				return fmt.Sprintf("%s (collation %q, not byte order)", col, c.name)
			}
		}
	}
	if d := m.p.coll.def.Load(); d != nil && !d.byteOrder() {
		return fmt.Sprintf("the database's default collation %q, not byte order", d.name)
	}
	return ""
}

// exprTextOrder returns the collation text computed by an expression over
// the model's rows orders in when the plugin knows it and it is not byte
// order: the database's default, where every text column of the model is
// of the default collation (an expression of them, without COLLATE,
// derives it). nil otherwise (byte order, or not known: the read is
// refused if the expression yields text, see hiddenValues).
//
// joined are the tables the read joins to the model's, whose text the
// expression may read as well.
func (m *model) exprTextOrder(ctx context.Context, joined ...string) *collation {
	if len(m.p.unreadCollations(ctx)) > 0 {
		return nil
	}
	d := m.p.coll.def.Load()
	if d == nil || d.byteOrder() {
		return nil
	}
	byCol := *m.p.coll.byCol.Load()
	for _, t := range append([]string{m.table}, joined...) {
		for _, c := range byCol[t] {
			if c.coll != "" || c.schema != "" || c.mixed {
				return nil
			}
		}
	}
	out := *d
	return &out
}

// nondeterministicText reports whether a text column of the model is in
// a nondeterministic collation on some server.
func (m *model) nondeterministicText() bool {
	for _, c := range (*m.p.coll.byCol.Load())[m.table] {
		if c.nondeterministic {
			return true
		}
	}
	return false
}
