package plugin

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// Filling and checking the IDs of new rows (shardkit:assign_id).

// assignID is shardkit:assign_id. It runs after the user's BeforeCreate
// hooks: it reads each new row's shard field and fills a zero primary key
// from the ID source, or checks a given one against the row's shard.
func (p *Plugin) assignID(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	m, _, err := p.lookup(db.Statement)
	if err != nil {
		db.AddError(err)
		return
	}
	if m == nil {
		return
	}
	if m.key != m.pk && !writes(db.Statement, m.key.DBName) {
		fail(db, m, -1, fmt.Errorf("%w: Create of %s leaves out the shard key %s (Select/Omit); the row would be stored without its key", ErrUnroutableSQL, m.schema.Name, m.key.DBName))
		return
	}
	snap := p.router.Snapshot()
	rv := db.Statement.ReflectValue
	// With the ID column left out by Select/Omit, the database's
	// DEFAULT next_id() gives the ID (read back with RETURNING), so that
	// the struct and the row agree.
	var sc scope
	hasScope := false
	if m.key == m.pk {
		sc, hasScope = scopeOf(db.Statement)
	}
	n := idCounts{dbOnly: !writes(db.Statement, m.pk.DBName), own: p.ownShard(db.Statement, sc, hasScope, m, snap)}
	switch rv.Kind() {
	case reflect.Struct:
		p.assignRow(db, m, rv, snap, &n)
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len() && db.Error == nil; i++ {
			p.assignRow(db, m, reflect.Indirect(rv.Index(i)), snap, &n)
		}
	default:
		fail(db, m, -1, fmt.Errorf("%w: Create from a %s; create from a struct or a slice of structs", ErrUnroutableSQL, rv.Kind()))
	}
	if n.fallback > 0 {
		p.dbIDs.Add(int64(n.fallback))
	}
	if db.Error == nil && n.given > 0 && n.dbOnly {
		fail(db, m, -1, fmt.Errorf("%w: Create of %s with IDs set leaves out the ID column %s (Select/Omit); the database would give the rows other IDs", ErrUnroutableSQL, m.schema.Name, m.pk.DBName))
		return
	}
	if db.Error == nil && n.fallback > 0 && n.dbOnly {
		db.Statement.AddClause(clause.Returning{Columns: []clause.Column{{Name: m.pk.DBName}}})
	}
	if db.Error == nil && n.fallback > 0 && !n.dbOnly && !m.pk.HasDefaultValue {
		// GORM would insert the zero key of a primary key declared
		// without a database default (autoIncrement:false): leave the
		// column out and read the DEFAULT next_id() back.
		if n.given > 0 {
			fail(db, m, -1, fmt.Errorf("%w: no ID slot, and rows with and without IDs in one Create of %s; create them separately", ErrUnroutableSQL, m.schema.Name))
			return
		}
		db.Statement.Omits = append(db.Statement.Omits, m.pk.DBName)
		db.Statement.AddClause(clause.Returning{Columns: []clause.Column{{Name: m.pk.DBName}}})
	}
}

// idCounts counts a Create's rows that came with an ID and rows left to
// the database's next_id().
type idCounts struct {
	given, fallback int
	dbOnly          bool // the INSERT leaves the ID column out
	own             int  // shard of new rows whose shard key is their own ID, or -1
}

// ownShard returns the shard of new rows of a model whose shard key is
// its own primary key (shard:"id" on the ID): the statement's Shard or
// ShardOfID scope, or the shard its transaction is pinned to; -1 if
// neither names one (or the model has another key).
func (p *Plugin) ownShard(stmt *gorm.Statement, sc scope, ok bool, m *model, snap *router.Snapshot) int {
	if m.key != m.pk {
		return -1
	}
	if ok && sc.kind != scopeAll {
		if s, err := p.shardOfScope(sc, snap); err == nil {
			return s
		}
	}
	if t := txOf(stmt.ConnPool); t != nil && !t.statement {
		s, _ := t.pinned()
		return s
	}
	return -1
}

func (p *Plugin) assignRow(db *gorm.DB, m *model, row reflect.Value, snap *router.Snapshot, n *idCounts) {
	ctx := db.Statement.Context
	shard, err := m.shardOfRow(db, row, snap)
	if errors.Is(err, errZeroKey) && n.own >= 0 {
		shard, err = n.own, nil // a new row keyed by its own ID, in the scope's shard
	}
	if err != nil {
		if errors.Is(err, errZeroKey) {
			err = ErrMissingShardKey
		}
		fail(db, m, -1, err)
		return
	}
	pk := m.pk.ReflectValueOf(ctx, row)
	if !pk.IsZero() {
		id := intOf(pk)
		if s, err := shardOfID(id, snap); err != nil || s != shard {
			fail(db, m, shard, fmt.Errorf("%w: ID %d is in shard %d, the row's %s is in shard %d", ErrIDShardMismatch, id, s, m.key.Name, shard))
		}
		n.given++
		return
	}
	if n.dbOnly || p.cfg.IDs == nil && len(m.lookups) == 0 {
		n.fallback++
		return // DEFAULT next_id(), read back with RETURNING
	}
	if !pk.CanSet() {
		fail(db, m, shard, fmt.Errorf("%w: Create needs a pointer to the row (or to a slice of rows) to fill its ID", ErrInvalidModel))
		return
	}
	var id int64
	err = errNoIDSource
	if p.cfg.IDs != nil {
		id, err = p.cfg.IDs.Next(ctx, shard)
	}
	if err != nil && (errors.Is(err, errNoIDSource) || p.cfg.NoSlot(err)) && len(m.lookups) > 0 {
		id, err = p.nextIDFromDB(ctx, snap, m, shard) // lookup rows need the ID first
	}
	if err != nil {
		if p.cfg.NoSlot(err) {
			n.fallback++
			return
		}
		fail(db, m, shard, fmt.Errorf("new ID: %w", err))
		return
	}
	if pk.Kind() == reflect.Int64 || pk.Kind() == reflect.Int {
		pk.SetInt(id)
	} else {
		pk.SetUint(uint64(id))
	}
}
