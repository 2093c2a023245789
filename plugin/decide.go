package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/internal/sqlcond"
	"github.com/shardkit/shardkit/router"
)

// decision is the routing answer for one statement, computed once by the
// route callback: its logical shards, the snapshot they were read from,
// and where each shard lives (after any fence wait). Pinning, pools and
// fan-out read it; nothing after routing looks the map up again.
type decision struct {
	m      *model
	snap   *router.Snapshot
	shards []int
	places []router.Placement // places[i] is the home of shards[i]; nil for one shard
	one    router.Placement   // the home of a single shard
	rows   map[int][]int      // Create: row indexes by shard; nil when one shard
	tx     *shardTx           // the statement's transaction, if any
	read   bool
	fenced time.Duration // time a write waited on fenced shards
}

// placement returns the home of the i-th shard.
func (d *decision) placement(i int) router.Placement {
	if d.places == nil {
		return d.one
	}
	return d.places[i]
}

// Build is part of clause.Expression; the decision adds no SQL.
func (*decision) Build(clause.Builder) {}

// decide computes a statement's routing decision into d. It reports
// false for a statement on an unsharded table (left on the default
// connection).
func (p *Plugin) decide(db *gorm.DB, o op, d *decision) (bool, error) {
	stmt := db.Statement
	cs := scanClauses(stmt)
	m, hint, err := p.lookup(stmt)
	if err != nil {
		return false, err
	}
	if m == nil {
		if err := p.checkUnshardedJoins(stmt); err != nil {
			return false, err
		}
		if err := p.checkSubqueries(stmt, nil, nil, nil); err != nil {
			return false, err
		}
		return false, p.unsharded(stmt)
	}
	*d = decision{m: m, read: o.read(), tx: txOf(stmt.ConnPool)}
	if err := m.tableExpr(stmt, &hint); err != nil {
		return true, err
	}
	d.snap = p.router.Snapshot()
	var set shardSet
	plainWhere := true
	if o == opCreate {
		set, d.rows, err = m.createShards(db, d.snap, p.ownShard(stmt, cs.scope, cs.hasScope, m, d.snap))
	} else {
		set, plainWhere, err = m.shardsAndShape(db, o, cs, d.snap)
		if err == nil && !set.known && hint < 0 && !cs.hasScope && len(m.lookups) > 0 {
			set, err = p.lookupShards(db, m, cs, d.snap) // a lookup column's equality
		}
	}
	if err == nil && hint >= 0 {
		set = set.and(one(hint))
	}
	if err == nil {
		set, err = p.scoped(cs.scope, cs.hasScope, set, d.snap)
	}
	if err != nil {
		return true, err
	}
	pinned := -1
	if d.tx != nil && !d.tx.statement {
		pinned, _ = d.tx.pinned()
	}
	switch {
	case !set.known && pinned >= 0:
		d.shards = one(pinned).list
	case !set.known:
		return true, ErrMissingShardKey
	case set.all && d.read && d.snap.Shards > 1:
		every := p.everyShard(d.snap)
		d.shards, d.places = every.shards, every.places
	case set.all:
		d.shards = make([]int, d.snap.Shards)
		for i := range d.shards {
			d.shards[i] = i
		}
	case len(set.list) > 0:
		d.shards = set.list
	case pinned >= 0:
		d.shards = one(pinned).list
	case d.tx != nil && !d.tx.spans():
		return true, fmt.Errorf("%w: the statement's conditions name no shard that can hold a row; a transaction needs a shard", ErrIDShardMismatch)
	default:
		// No row can match. Running the statement on one shard, where it
		// finds nothing, gives GORM's own result for "nothing".
		d.shards = one(0).list
	}
	if len(d.shards) > 1 {
		if d.tx != nil && !d.tx.spans() {
			return true, fmt.Errorf("%w: the statement spans %d shards", ErrCrossShard, len(d.shards))
		}
		if err := checkFromJoins(stmt, len(d.shards)); err != nil {
			return true, err
		}
	}
	if cs.partial && o != opQuery {
		return true, fmt.Errorf("%w: plugin.Partial applies to reads (Find, First, Take, Count, Pluck); a write either reaches every shard it names or fails", ErrUnroutableSQL)
	}
	if o == opUpdate {
		if err := m.checkAssignments(db, d.shards, d.snap); err != nil {
			return true, err
		}
	}
	if !plainWhere || !simpleClauses(stmt, cs) {
		if err := p.checkSubqueries(stmt, m, d.shards, d.snap); err != nil {
			return true, err
		}
	}
	return true, p.place(stmt.Context, d)
}

// place finds each shard's home; a write to a fenced shard waits for the
// move to finish (see waitFence) and takes the new home.
func (p *Plugin) place(ctx context.Context, d *decision) error {
	if d.places != nil {
		return nil // a read of every shard: placed by everyShard
	}
	if len(d.shards) > 1 {
		d.places = make([]router.Placement, len(d.shards))
	}
	if d.tx != nil && !d.read {
		d.fenced += d.tx.takeFenceWait() // the wait before the transaction began
	}
	for i, s := range d.shards {
		pl, err := d.snap.Placement(s)
		if err != nil {
			return err
		}
		if !d.read && pl.State == router.StateFenced {
			if d.tx != nil && d.tx.openOn(pl.Server) {
				// The transaction already runs on the fenced server: its
				// write can only be refused there once the fence ends (a
				// move's flip, a switchover's new primary), and while it
				// waits it holds up the fence (a cutover's locks, a
				// switchover's drain). Run it again, whole.
				return &ShardError{Shard: s, Server: pl.Server, Err: fmt.Errorf("%w: %w", ErrShardMoved, ErrShardFenced)}
			}
			start := time.Now()
			snap, fresh, err := p.waitFence(ctx, s)
			d.fenced += time.Since(start)
			if err != nil {
				return err
			}
			pl, d.snap = fresh, snap
		}
		if d.places == nil {
			d.one = pl
		} else {
			d.places[i] = pl
		}
	}
	return nil
}

// placedAll is every shard of a snapshot with its placement, shared
// read-only by the reads of every shard routed with that snapshot: such a
// read reads them all, and copying 2000 placements a read was a tenth of
// what it allocated.
type placedAll struct {
	snap   *router.Snapshot
	shards []int
	places []router.Placement
}

// everyShard returns every shard of snap, placed. Reads do not wait on
// fenced shards, so their placements are the snapshot's as they are.
func (p *Plugin) everyShard(snap *router.Snapshot) *placedAll {
	if c := p.every.Load(); c != nil && c.snap == snap {
		return c
	}
	c := &placedAll{snap: snap, shards: make([]int, snap.Shards), places: snap.Placements()}
	for i := range c.shards {
		c.shards[i] = i
	}
	p.every.Store(c)
	return c
}

// tableExpr accepts a Table() that names the model's table, bare or in a
// shard's schema (a hint), and drops it so that the plugin's qualified
// name is used. Any other table expression is refused: it would be sent
// as written, whatever shard the statement routes to.
func (m *model) tableExpr(stmt *gorm.Statement, hint *int) error {
	te := stmt.TableExpr
	if te == nil {
		return nil
	}
	if toks, _, ok := sqlcond.Lex(te.SQL, false, nil); ok && len(te.Vars) == 0 {
		switch {
		case len(toks) == 1 && toks[0].Kind == sqlcond.Ident && toks[0].Text == m.table:
			stmt.TableExpr = nil
			return nil
		case len(toks) == 3 && toks[0].Kind == sqlcond.Ident && toks[1].Kind == sqlcond.Dot && toks[2].Kind == sqlcond.Ident && toks[2].Text == m.table:
			if s, err := router.ParseSchemaName(toks[0].Text); err == nil && (*hint < 0 || *hint == s) {
				*hint = s
				stmt.TableExpr = nil
				return nil
			}
		}
	}
	return fmt.Errorf("%w: Table(%q) on sharded model %s; leave the table to the plugin, or name it %q", ErrUnroutableSQL, te.SQL, m.schema.Name, m.table)
}

// scoped applies the statement's Shard, ShardOfID or AllShards scope.
func (p *Plugin) scoped(sc scope, ok bool, set shardSet, snap *router.Snapshot) (shardSet, error) {
	if !ok {
		return set, nil
	}
	if sc.kind == scopeAll {
		return set.and(shardSet{known: true, all: true}), nil
	}
	s, err := p.shardOfScope(sc, snap)
	if err != nil {
		return set, err
	}
	out := set.and(one(s))
	if set.known && len(set.list) > 0 && len(out.list) == 0 {
		return out, fmt.Errorf("%w: the statement is scoped to shard %d, its rows or conditions are in shard %d", ErrCrossShard, s, set.list[0])
	}
	return out, nil
}

// shardsOf finds the shards a query, update, delete or row statement may
// touch: its WHERE clause, and the primary keys GORM adds from the model
// value when the clause is a plain AND.
func (m *model) shardsOf(db *gorm.DB, o op, snap *router.Snapshot) (shardSet, error) {
	set, _, err := m.shardsAndShape(db, o, scanClauses(db.Statement), snap)
	return set, err
}

// clauseScan is what routing reads from a statement's clauses, taken in
// one pass over the clause map: a lookup by name would hash the name each
// time, which is a fair part of routing's cost.
type clauseScan struct {
	where    clause.Clause
	hasWhere bool
	scope    scope
	hasScope bool
	plain    bool // the clauses besides WHERE hold no sub-query (see simpleClauses)
	partial  bool // a Partial scope
}

// scanClauses reads a statement's clauses once. It drops a plan left by
// a failed earlier run of the statement.
func scanClauses(stmt *gorm.Statement) clauseScan {
	cs := clauseScan{plain: true}
	for name, c := range stmt.Clauses {
		switch name {
		case "WHERE":
			cs.where, cs.hasWhere = c, true
		case "LIMIT":
		case partialName:
			cs.partial = true
		case scopeName:
			cs.scope, cs.hasScope = c.Expression.(scope)
		case planName:
			delete(stmt.Clauses, planName)
		case "ORDER BY":
			if ob, ok := c.Expression.(clause.OrderBy); !ok || ob.Expression != nil {
				cs.plain = false
			}
		case "SELECT":
			if sel, ok := c.Expression.(clause.Select); !ok || sel.Expression != nil {
				cs.plain = false
			}
		default:
			cs.plain = false
		}
	}
	return cs
}

// shardsAndShape is shardsOf, also reporting whether the WHERE clause was
// a plain AND of conditions with bound values only (so it holds no
// sub-query).
func (m *model) shardsAndShape(db *gorm.DB, o op, cs clauseScan, snap *router.Snapshot) (shardSet, bool, error) {
	set, pureAnd, err := m.whereShards(db.Statement, cs, snap)
	if err == nil && !pureAnd && loneOrs(cs) {
		// A WHERE of lone Ors only, with the model's key conditions
		// GORM appends: clause.Where.Build moves the first of those to
		// the front, so the statement reads "key OR …", and the key's
		// shards join the clause's.
		pk, perr := m.valueShards(db, o, snap)
		if perr != nil {
			return set, false, perr
		}
		if pk.known {
			set = set.or(pk)
		}
		return set, false, nil
	}
	if err != nil || !pureAnd {
		// Otherwise GORM appends the model's key conditions with AND
		// after any OR: they bind to the last branch only, so they
		// narrow nothing here.
		return set, false, err
	}
	pk, err := m.valueShards(db, o, snap)
	if err != nil {
		return set, true, err
	}
	return set.and(pk), true, nil
}

// loneOrs reports a WHERE clause whose every condition is a lone Or
// (db.Or(cond) with no Where before it): GORM builds them joined by OR,
// and moves a condition appended later in front of them.
func loneOrs(cs clauseScan) bool {
	w, ok := cs.where.Expression.(clause.Where)
	if !cs.hasWhere || !ok || len(w.Exprs) == 0 {
		return false
	}
	for _, e := range w.Exprs {
		if or, ok := e.(clause.OrConditions); !ok || len(or.Exprs) > 1 {
			return false
		}
	}
	return true
}

// valueShards reads the shards of the primary keys in the statement's
// model value, which GORM adds to the WHERE clause.
func (m *model) valueShards(db *gorm.DB, o op, snap *router.Snapshot) (shardSet, error) {
	stmt := db.Statement
	rv := stmt.ReflectValue
	switch {
	case rv.Kind() == reflect.Struct && rv.Type() == m.schema.ModelType:
		pk := m.pk.ReflectValueOf(stmt.Context, rv)
		if pk.IsZero() {
			return shardSet{}, nil
		}
		id := intOf(pk)
		s, err := shardOfID(id, snap)
		if err != nil {
			return shardSet{}, err
		}
		if o == opUpdate || o == opDelete {
			if ks, err := m.shardOfRow(db, rv, snap); err == nil && ks != s {
				return shardSet{}, fmt.Errorf("%w: ID %d is in shard %d, the row's %s is in shard %d", ErrIDShardMismatch, id, s, m.key.Name, ks)
			}
		}
		return one(s), nil
	case (o == opUpdate || o == opDelete) && rv.Kind() == reflect.Slice:
		var list []int
		for i := 0; i < rv.Len(); i++ {
			row := reflect.Indirect(rv.Index(i))
			if row.Type() != m.schema.ModelType {
				return shardSet{}, nil
			}
			pk := m.pk.ReflectValueOf(stmt.Context, row)
			if pk.IsZero() {
				return shardSet{}, nil // GORM adds no key condition then
			}
			s, err := shardOfID(intOf(pk), snap)
			if err != nil {
				return shardSet{}, err
			}
			list = append(list, s)
		}
		if len(list) > 0 {
			return setOf(list), nil
		}
	}
	return shardSet{}, nil
}

// createShards groups the rows of a Create by shard. rows is nil when
// they all belong to one shard. own is the shard of new rows keyed by
// their own (still zero) ID, or -1 (see ownShard).
func (m *model) createShards(db *gorm.DB, snap *router.Snapshot, own int) (shardSet, map[int][]int, error) {
	rv := db.Statement.ReflectValue
	if rv.Kind() == reflect.Struct {
		s, err := m.shardOfRow(db, rv, snap)
		if errors.Is(err, errZeroKey) && own >= 0 {
			s, err = own, nil
		}
		if err != nil {
			return shardSet{}, nil, zeroKey(err)
		}
		return one(s), nil, nil
	}
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return shardSet{}, nil, fmt.Errorf("%w: Create from a %s", ErrUnroutableSQL, rv.Kind())
	}
	var rows map[int][]int
	list := make([]int, 0, rv.Len())
	first := -1
	for i := 0; i < rv.Len(); i++ {
		s, err := m.shardOfRow(db, reflect.Indirect(rv.Index(i)), snap)
		if errors.Is(err, errZeroKey) && own >= 0 {
			s, err = own, nil
		}
		if err != nil {
			return shardSet{}, nil, zeroKey(err)
		}
		if first < 0 {
			first = s
		}
		if s != first && rows == nil {
			rows = map[int][]int{first: make([]int, 0, i)}
			for j := 0; j < i; j++ {
				rows[first] = append(rows[first], j)
			}
		}
		if rows != nil {
			rows[s] = append(rows[s], i)
		}
		list = append(list, s)
	}
	if len(list) == 0 {
		return none, nil, nil
	}
	return setOf(list), rows, nil
}

// writes reports whether a Create writes a column, after Select and Omit
// (GORM's own rule for the INSERT's columns).
func writes(stmt *gorm.Statement, column string) bool {
	if len(stmt.Selects) == 0 && len(stmt.Omits) == 0 {
		return true
	}
	sel, restricted := stmt.SelectAndOmitColumns(true, false)
	v, ok := sel[column]
	return ok && v || !ok && !restricted
}

// checkAssignments refuses an UPDATE that would move rows out of their
// shard: an assignment to the shard field of a value of another shard
// than the statement's, or to the primary key. A row never changes shard
// in place; create it anew in the new shard and delete the old one.
func (m *model) checkAssignments(db *gorm.DB, shards []int, snap *router.Snapshot) error {
	stmt := db.Statement
	check := func(col string, v any) error {
		f := m.schema.LookUpField(col)
		if f == nil || f != m.key && f != m.pk {
			return nil
		}
		if inline(v) {
			return fmt.Errorf("%w: UPDATE sets %s to an expression; the plugin cannot tell its shard", ErrShardKeyChange, f.DBName)
		}
		if f == m.pk {
			if id, err := toInt64(v); err == nil && id == m.ownID(db) && id != 0 {
				return nil // the row's own ID, as Updates(struct) writes it
			}
			return fmt.Errorf("%w: UPDATE sets the ID column %s; IDs never change", ErrShardKeyChange, f.DBName)
		}
		got, err := valueShards(m.kind, v, snap)
		if err != nil {
			return fmt.Errorf("%w: UPDATE sets %s: %w", ErrShardKeyChange, f.DBName, err)
		}
		if !got.known || len(got.list) != 1 || len(shards) != 1 || got.list[0] != shards[0] {
			return fmt.Errorf("%w: UPDATE sets %s to %v, which belongs to another shard than the rows it updates", ErrShardKeyChange, f.DBName, v)
		}
		return nil
	}
	return m.eachAssignment(stmt, []*schema.Field{m.key, m.pk}, check)
}

// eachAssignment calls fn with each column an UPDATE assigns and its
// value, read as GORM writes them: the SET clause, a map destination, or
// a struct destination (for the given fields only) after Select and Omit.
// The model's own primary key, which GORM makes the condition when the
// destination is the model, is not an assignment.
func (m *model) eachAssignment(stmt *gorm.Statement, fields []*schema.Field, fn func(col string, v any) error) error {
	if c, ok := stmt.Clauses["SET"]; ok {
		if set, ok := c.Expression.(clause.Set); ok {
			for _, a := range set {
				if err := fn(a.Column.Name, a.Value); err != nil {
					return err
				}
			}
		}
	}
	var sel map[string]bool
	var restricted bool
	if len(stmt.Selects) > 0 || len(stmt.Omits) > 0 {
		sel, restricted = stmt.SelectAndOmitColumns(false, true)
	}
	assigned := func(col string, zero bool) bool {
		if v, ok := sel[col]; ok {
			return v
		}
		return !restricted && !zero
	}
	switch d := stmt.Dest.(type) {
	case map[string]any:
		for k, v := range d {
			f := m.schema.LookUpField(k)
			if f != nil && assigned(f.DBName, false) {
				if err := fn(f.DBName, v); err != nil {
					return err
				}
			}
		}
	default:
		rv := reflect.Indirect(reflect.ValueOf(stmt.Dest))
		if rv.Kind() != reflect.Struct || rv.Type() != m.schema.ModelType {
			return nil
		}
		for _, f := range fields {
			v := f.ReflectValueOf(stmt.Context, rv)
			if f == m.pk && rv.CanAddr() && stmt.Dest == stmt.Model {
				continue // GORM uses the model's own key as the condition
			}
			if assigned(f.DBName, v.IsZero()) {
				if err := fn(f.DBName, v.Interface()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ownID is the primary key of the statement's model value, or 0.
func (m *model) ownID(db *gorm.DB) int64 {
	rv := reflect.Indirect(reflect.ValueOf(db.Statement.Model))
	if rv.Kind() != reflect.Struct || rv.Type() != m.schema.ModelType {
		return 0
	}
	return intOf(m.pk.ReflectValueOf(db.Statement.Context, rv))
}

func zeroKey(err error) error {
	if errors.Is(err, errZeroKey) {
		return ErrMissingShardKey
	}
	return err
}
