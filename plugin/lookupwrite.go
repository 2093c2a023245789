package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// How a write keeps lookup tables consistent without two-phase commit.
//
// A write that gives a row a lookup value (Create, or Update of the
// column) first claims the value, then holds it, then writes the owner:
//
//  1. claim: INSERT the lookup row (value → owner ID) in the value's
//     shard, committed on its own. Its primary key is the global
//     uniqueness check. On a unique violation the holder is checked: if
//     the holder's owner row exists and holds the value, the value is
//     taken (ErrDuplicateLookup); if not, the row is an orphan and is
//     taken over (reclaim, below).
//  2. hold: in a transaction on the lookup row's server, a no-op UPDATE
//     of the row WHERE owner_id = the writer: it fails if another writer
//     reclaimed the row since step 1 (ErrDuplicateLookup), and it locks
//     the row until the owner row's write has committed.
//  3. write the owner row (GORM's statement, and its commit).
//  4. release: roll the hold back. On success, lookup rows of old values
//     (an Update) are dropped if orphaned; on failure, the rows this write
//     claimed are dropped if orphaned.
//
// A reclaimer locks the lookup row (SELECT … FOR UPDATE), so it waits for
// a writer between steps 2 and 4; it then reads the holder's owner row on
// a freshly loaded shard map, and sees a committed owner row. So a live
// writer past step 2 is never robbed, and a value has at most one owner
// row once the writes that claimed it returned. A writer between steps 1
// and 2 can be robbed by a concurrent reclaimer (its owner row does not
// exist yet): it then fails with ErrDuplicateLookup and writes nothing.

// lookupCleanupTimeout bounds the clean-up after a write (dropping
// orphans), which runs even when the statement's context has ended.
const lookupCleanupTimeout = 10 * time.Second

// reservation is one lookup row a write claims (or drops).
type reservation struct {
	lc    *lookupCol
	value any    // string or int64
	key   string // canonical text
	owner int64
	shard int  // the lookup row's shard
	took  bool // this write inserted or reclaimed the row
}

// reserved is what a write holds between its owner write and release.
type reserved struct {
	m     *model
	rs    []*reservation
	holds []*sql.Tx
	drop  []*reservation // old values, dropped if orphaned after success
}

func (p *Plugin) newReservation(lc *lookupCol, v any, owner int64, shards int) (*reservation, error) {
	key, err := canonical(v)
	if err != nil {
		return nil, err
	}
	s, err := router.ShardOfString(key, shards)
	if err != nil {
		return nil, err
	}
	return &reservation{lc: lc, value: v, key: key, owner: owner, shard: s}, nil
}

// inUserTx reports a statement inside a transaction the caller began.
func inUserTx(stmt *gorm.Statement) bool {
	t := txOf(stmt.ConnPool)
	if t != nil && !t.statement {
		return true
	}
	_, ok := stmt.ConnPool.(gorm.TxCommitter)
	return ok && t == nil
}

// lookupReserveCreate is shardkit:lookup_reserve of Create: it claims and
// holds the lookup values of the new rows before they are written.
func (p *Plugin) lookupReserveCreate(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	stmt := db.Statement
	m, _, err := p.lookup(stmt)
	if err != nil || m == nil || len(m.lookups) == 0 {
		return // an error is the route callback's to report
	}
	if inUserTx(stmt) {
		fail(db, m, -1, fmt.Errorf("%w: Create of %s", ErrLookupInTransaction, m.schema.Name))
		return
	}
	if _, ok := stmt.Clauses["ON CONFLICT"]; ok {
		fail(db, m, -1, fmt.Errorf("%w: Create of %s with ON CONFLICT (an upsert); create and update separately", ErrLookupWrite, m.schema.Name))
		return
	}
	for _, lc := range m.lookups {
		if !writes(stmt, lc.column) {
			fail(db, m, -1, fmt.Errorf("%w: Create of %s leaves out the lookup column %s (Select/Omit)", ErrLookupWrite, m.schema.Name, lc.column))
			return
		}
	}
	ctx := stmt.Context
	snap := p.router.Snapshot()
	var rs []*reservation
	row := func(rv reflect.Value) error {
		var id int64
		for _, lc := range m.lookups {
			v := lc.valueOf(rv, func(r reflect.Value) reflect.Value { return lc.field.ReflectValueOf(ctx, r) })
			if v == nil {
				continue // NULL: no lookup row
			}
			if id == 0 {
				var err error
				if id, err = ownerID(db, m, rv); err != nil {
					return err
				}
			}
			r, err := p.newReservation(lc, v, id, snap.Shards)
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
		return nil
	}
	rv := stmt.ReflectValue
	switch rv.Kind() {
	case reflect.Struct:
		err = row(rv)
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len() && err == nil; i++ {
			err = row(reflect.Indirect(rv.Index(i)))
		}
	default:
		return // the route callback refuses it
	}
	if err == nil {
		var res *reserved
		if res, err = p.reserve(ctx, snap, m, rs); err == nil {
			stmt.Settings.Store(lookupSettings, res)
		}
	}
	if err != nil {
		fail(db, m, -1, err)
	}
}

// ownerID returns a new row's ID. assignRow gave every row of a model
// with lookup columns its ID, from the ID source or the shard's
// next_id(), unless Select or Omit leaves the ID column to the database.
func ownerID(db *gorm.DB, m *model, rv reflect.Value) (int64, error) {
	pk := m.pk.ReflectValueOf(db.Statement.Context, rv)
	if pk.IsZero() {
		return 0, fmt.Errorf("%w: Create of %s leaves the ID to the database (Select/Omit), and a lookup row needs its owner's ID first", ErrLookupWrite, m.schema.Name)
	}
	return intOf(pk), nil
}

// nextIDFromDB takes an ID from a shard's next_id(), for a new row of a
// model with lookup columns when the ID source has none to give: its
// lookup rows need the ID before the row exists.
func (p *Plugin) nextIDFromDB(ctx context.Context, snap *router.Snapshot, m *model, shard int) (int64, error) {
	pl, err := snap.Placement(shard)
	if err != nil {
		return 0, err
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return 0, err
	}
	var id int64
	q := "SELECT " + pgx.Identifier{router.SchemaName(shard)}.Sanitize() + ".next_id()"
	err = srv.QueryRowContext(ctx, q).Scan(&id)
	srv.report(err, p.cfg.ServerRetry)
	if err != nil {
		if unavailable(err) {
			return 0, &ServerError{Server: pl.Server, Shards: []int{shard}, Table: m.table, Err: err}
		}
		return 0, &ShardError{Shard: shard, Server: pl.Server, Table: m.table, Err: fmt.Errorf("next_id: %w", err)}
	}
	return id, nil
}

// lookupReserveUpdate is shardkit:lookup_reserve of Update: an UPDATE that
// sets a lookup column claims and holds the new value, and drops the old
// one after it committed.
func (p *Plugin) lookupReserveUpdate(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	stmt := db.Statement
	m, _, err := p.lookup(stmt)
	if err != nil || m == nil || len(m.lookups) == 0 {
		return
	}
	sets, err := m.lookupAssignments(db)
	if err != nil || len(sets) == 0 {
		if err != nil {
			fail(db, m, -1, err)
		}
		return
	}
	if err := p.reserveUpdate(db, m, sets); err != nil {
		fail(db, m, -1, err)
	}
}

func (p *Plugin) reserveUpdate(db *gorm.DB, m *model, sets map[*lookupCol]any) error {
	stmt := db.Statement
	if inUserTx(stmt) {
		return fmt.Errorf("%w: UPDATE of %s sets a lookup column", ErrLookupInTransaction, m.schema.Name)
	}
	id := m.ownID(db)
	snap := p.router.Snapshot()
	if id != 0 {
		if _, pureAnd, err := m.whereShards(stmt, scanClauses(stmt), snap); err != nil || !pureAnd {
			id = 0 // an OR would not bind to the ID condition GORM appends
		}
	}
	if id == 0 {
		return fmt.Errorf("%w: UPDATE of %s sets a lookup column without naming its one row by ID; use db.Model(&row) with the row's ID, and no OR", ErrLookupWrite, m.schema.Name)
	}
	// The old values, to drop their lookup rows once the update is in.
	old, found, err := p.ownerValues(stmt.Context, snap, m, id)
	if err != nil || !found {
		return err // no row: the UPDATE changes nothing
	}
	var rs, drop []*reservation
	for _, lc := range m.lookups {
		nv, ok := sets[lc]
		if !ok || nv == old[lc] {
			continue
		}
		if nv != nil {
			r, err := p.newReservation(lc, nv, id, snap.Shards)
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
		if ov := old[lc]; ov != nil {
			r, err := p.newReservation(lc, ov, id, snap.Shards)
			if err != nil {
				return err
			}
			drop = append(drop, r)
		}
	}
	res, err := p.reserve(stmt.Context, snap, m, rs)
	if err != nil {
		return err
	}
	res.drop = drop
	stmt.Settings.Store(lookupSettings, res)
	return nil
}

// ownerValues reads the lookup columns of an owner row.
func (p *Plugin) ownerValues(ctx context.Context, snap *router.Snapshot, m *model, id int64) (map[*lookupCol]any, bool, error) {
	s, err := shardOfID(id, snap)
	if err != nil {
		return nil, false, nil
	}
	pl, err := snap.Placement(s)
	if err != nil {
		return nil, false, err
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return nil, false, err
	}
	q := "SELECT "
	dest := make([]any, len(m.lookups))
	for i, lc := range m.lookups {
		if i > 0 {
			q += ", "
		}
		q += pgx.Identifier{lc.column}.Sanitize()
		if lc.text {
			dest[i] = new(sql.NullString)
		} else {
			dest[i] = new(sql.NullInt64)
		}
	}
	q += " FROM " + m.quoted[s] + " WHERE " + pgx.Identifier{m.pk.DBName}.Sanitize() + " = $1"
	err = srv.QueryRowContext(ctx, q, id).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, &ShardError{Shard: s, Server: pl.Server, Table: m.table, Err: fmt.Errorf("read lookup columns: %w", err)}
	}
	out := make(map[*lookupCol]any, len(m.lookups))
	for i, lc := range m.lookups {
		switch d := dest[i].(type) {
		case *sql.NullString:
			if d.Valid {
				out[lc] = d.String
			}
		case *sql.NullInt64:
			if d.Valid {
				out[lc] = d.Int64
			}
		}
	}
	return out, true, nil
}

// lookupRelease is shardkit:lookup_release, after the statement's commit
// or rollback: it lets go of the held lookup rows, and drops the ones
// left orphaned.
func (p *Plugin) lookupRelease(db *gorm.DB) {
	v, ok := db.Statement.Settings.LoadAndDelete(lookupSettings)
	if !ok {
		return
	}
	res := v.(*reserved)
	for _, tx := range res.holds {
		_ = tx.Rollback() // the hold's no-op UPDATE: nothing to keep
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(db.Statement.Context), lookupCleanupTimeout)
	defer cancel()
	if db.Error != nil || db.RowsAffected == 0 {
		// Failed, or an Update whose conditions matched no row: the
		// values it claimed have no owner row holding them.
		p.abandon(ctx, res)
		return
	}
	for _, r := range res.drop {
		_ = p.dropIfOrphan(ctx, res.m, r) // a leftover orphan is reclaimable
	}
}

// lookupCleanupDelete is shardkit:lookup_release of Delete: it drops the
// lookup rows of deleted rows whose values the statement's model holds.
// Rows deleted by conditions alone leave orphans, which a later write of
// the value reclaims.
func (p *Plugin) lookupCleanupDelete(db *gorm.DB) {
	stmt := db.Statement
	if db.Error != nil || db.RowsAffected == 0 || inUserTx(stmt) {
		return
	}
	m, _, err := p.lookup(stmt)
	if err != nil || m == nil || len(m.lookups) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(stmt.Context), lookupCleanupTimeout)
	defer cancel()
	shards := p.router.Snapshot().Shards
	row := func(rv reflect.Value) {
		if rv.Kind() != reflect.Struct || rv.Type() != m.schema.ModelType {
			return
		}
		id := intOf(m.pk.ReflectValueOf(ctx, rv))
		if id == 0 {
			return
		}
		for _, lc := range m.lookups {
			v := lc.valueOf(rv, func(r reflect.Value) reflect.Value { return lc.field.ReflectValueOf(ctx, r) })
			if v == nil {
				continue
			}
			if r, err := p.newReservation(lc, v, id, shards); err == nil {
				_ = p.dropIfOrphan(ctx, m, r)
			}
		}
	}
	rv := stmt.ReflectValue
	switch rv.Kind() {
	case reflect.Struct:
		row(rv)
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			row(reflect.Indirect(rv.Index(i)))
		}
	}
}
