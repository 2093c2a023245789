package plugin

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// reserve claims every reservation, then holds them all.
func (p *Plugin) reserve(ctx context.Context, snap *router.Snapshot, m *model, rs []*reservation) (*reserved, error) {
	res := &reserved{m: m, rs: rs}
	if len(rs) == 0 {
		return res, nil
	}
	// One order for every writer: claims and holds never wait in a cycle.
	slices.SortFunc(rs, func(a, b *reservation) int {
		return cmp.Or(cmp.Compare(a.lc.table, b.lc.table), cmp.Compare(a.key, b.key))
	})
	for i := 1; i < len(rs); i++ {
		if rs[i].lc == rs[i-1].lc && rs[i].key == rs[i-1].key {
			return nil, fmt.Errorf("shardkit: %w: %s %q twice in one statement", ErrDuplicateLookup, rs[i].lc.column, rs[i].key)
		}
	}
	for _, r := range rs {
		if err := p.claim(ctx, snap, m, r); err != nil {
			p.abandon(ctx, res)
			return nil, err
		}
	}
	// A claim that met a moved shard reloaded the map: hold on that one.
	if cur := p.router.Snapshot(); cur.Version > snap.Version {
		snap = cur
	}
	err := p.hold(ctx, snap, res)
	if moved, ok := p.movedHome(ctx, err); ok {
		p.unhold(res)
		err = p.hold(ctx, moved, res)
	}
	if err != nil {
		p.unhold(res)
		p.abandon(ctx, res)
		return nil, err
	}
	return res, nil
}

// unhold rolls back a write's holds.
func (p *Plugin) unhold(res *reserved) {
	for _, tx := range res.holds {
		_ = tx.Rollback()
	}
	res.holds = nil
}

// movedHome reports a lookup statement that the old home of its shard
// refused because the shard moved (lookupErr made it ErrShardMoved), and
// returns the map that places the shard on its new home, to run the
// statement there once more: what runWrite does for the row's own write,
// through the same wait (awaitMove, at most Config.FenceWait).
func (p *Plugin) movedHome(ctx context.Context, err error) (*router.Snapshot, bool) {
	var se *ShardError
	if !errors.Is(err, ErrShardMoved) || !errors.As(err, &se) {
		return nil, false
	}
	snap, _, werr := p.awaitMove(ctx, se.Shard, se.Server)
	return snap, werr == nil
}

// abandon drops the lookup rows a failed write claimed, if orphaned.
func (p *Plugin) abandon(ctx context.Context, res *reserved) {
	for _, r := range res.rs {
		if r.took {
			_ = p.dropIfOrphan(ctx, res.m, r) // a leftover orphan is reclaimable
		}
	}
}

// lookupDB returns a lookup pool (see lookupPools) of the server holding
// a lookup row's shard; a write to a fenced shard waits for the move like
// any write.
func (p *Plugin) lookupDB(ctx context.Context, snap *router.Snapshot, shard int, hold bool) (*sql.DB, router.Placement, error) {
	pl, err := snap.Placement(shard)
	if err != nil {
		return nil, pl, err
	}
	if pl.State == router.StateFenced {
		if snap, pl, err = p.waitFence(ctx, shard); err != nil {
			return nil, pl, err
		}
	}
	db, err := p.lookups.get(snap, pl.Server, hold)
	return db, pl, err
}

// lookupErr gives a lookup table's error its place, and turns a moved
// shard's refusal into the retriable ErrShardMoved.
func (p *Plugin) lookupErr(ctx context.Context, r *reservation, pl router.Placement, err error) error {
	switch {
	case router.IsFenceError(err):
		_, _ = p.router.Reload(ctx)
		err = fmt.Errorf("%w: %w", ErrShardMoved, err)
	case router.IsUndefinedTable(err) && p.movedAway(ctx, r.shard, pl.Server):
		// A copy a rollback dropped (see movedAway): moved as well.
		err = fmt.Errorf("%w: %w", ErrShardMoved, err)
	}
	return &ShardError{Shard: r.shard, Server: pl.Server, Table: r.lc.table, Err: err}
}

const (
	sqlClaim    = "INSERT INTO %s (value, owner_id) VALUES ($1, $2)"
	sqlHold     = "UPDATE %s SET owner_id = owner_id WHERE value = $1 AND owner_id = $2"
	sqlLockRow  = "SELECT owner_id FROM %s WHERE value = $1 FOR UPDATE"
	sqlTakeOver = "UPDATE %s SET owner_id = $3 WHERE value = $1 AND owner_id = $2"
	sqlDrop     = "DELETE FROM %s WHERE value = $1 AND owner_id = $2"
)

// claimAttempts bounds the rounds of a claim whose lookup row comes and
// goes under it (deleted between the insert's conflict and the lock).
const claimAttempts = 5

// claim inserts a lookup row, or takes over an orphaned one (step 1). A
// claim the old home of a moved shard refused runs once more on the new
// home.
func (p *Plugin) claim(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) error {
	retried := false
	for range claimAttempts {
		done, err := p.claimOnce(ctx, snap, m, r)
		if moved, ok := p.movedHome(ctx, err); ok && !retried {
			snap, retried = moved, true
			continue
		}
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("shardkit: %w: %s %q: its lookup row kept changing under %d attempts", ErrDuplicateLookup, r.lc.column, r.key, claimAttempts)
}

// claimOnce is one round of claim; it reports false when the lookup row
// went away between the insert's conflict and the lock (claim again).
func (p *Plugin) claimOnce(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) (bool, error) {
	db, pl, err := p.lookupDB(ctx, snap, r.shard, false)
	if err != nil {
		return false, err
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf(sqlClaim, r.lc.quoted[r.shard]), r.value, r.owner)
	if err == nil {
		r.took = true
		return true, nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	return p.reclaim(ctx, db, pl, m, r, pe)
}

// reclaim handles a claim's unique violation: the value is ours already,
// or taken, or held by an orphan, which it takes over. It reports false
// when the lookup row went away meanwhile (claim again).
func (p *Plugin) reclaim(ctx context.Context, db *sql.DB, pl router.Placement, m *model, r *reservation, dup error) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	defer func() { _ = tx.Rollback() }()
	q := r.lc.quoted[r.shard]
	var owner int64
	err = tx.QueryRowContext(ctx, fmt.Sprintf(sqlLockRow, q), r.value).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	if owner == r.owner {
		return true, nil // the row's own value (an update that keeps it)
	}
	holds, err := p.ownerHolds(ctx, m, r.lc, owner, r.value)
	if err != nil {
		return false, err
	}
	if holds {
		return true, fmt.Errorf("shardkit: %w: %s %q: %w", ErrDuplicateLookup, r.lc.column, r.key, dup)
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(sqlTakeOver, q), r.value, owner, r.owner)
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, nil
	}
	if err := tx.Commit(); err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	r.took = true
	return true, nil
}

// ownerHolds reports whether an owner row exists and holds the value. It
// reads a freshly loaded shard map: with a stale one, an owner row on the
// new home of a moved shard would look missing.
func (p *Plugin) ownerHolds(ctx context.Context, m *model, lc *lookupCol, owner int64, value any) (bool, error) {
	snap, err := p.router.Reload(ctx)
	if err != nil {
		return false, fmt.Errorf("shardkit: check the owner of a lookup row: %w", err)
	}
	s, err := shardOfID(owner, snap)
	if err != nil {
		return false, nil // an ID no shard holds has no row
	}
	pl, err := snap.Placement(s)
	if err != nil {
		return false, err
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return false, err
	}
	q := "SELECT EXISTS (SELECT 1 FROM " + m.quoted[s] + " WHERE " + pgx.Identifier{m.pk.DBName}.Sanitize() +
		" = $1 AND " + pgx.Identifier{lc.column}.Sanitize() + " = $2)"
	var ok bool
	if err := srv.QueryRowContext(ctx, q, owner, value).Scan(&ok); err != nil {
		return false, &ShardError{Shard: s, Server: pl.Server, Table: m.table, Err: fmt.Errorf("check the owner of a lookup row: %w", err)}
	}
	return ok, nil
}

// hold locks every claimed row until release (step 2), one transaction
// per server, servers in name order.
func (p *Plugin) hold(ctx context.Context, snap *router.Snapshot, res *reserved) error {
	type group struct {
		server string
		pl     router.Placement
		db     *sql.DB
		rs     []*reservation
	}
	var groups []*group
	for _, r := range res.rs {
		db, pl, err := p.lookupDB(ctx, snap, r.shard, true)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.server == pl.Server })
		if i < 0 {
			groups = append(groups, &group{server: pl.Server, pl: pl, db: db})
			i = len(groups) - 1
		}
		groups[i].rs = append(groups[i].rs, r)
	}
	slices.SortFunc(groups, func(a, b *group) int { return cmp.Compare(a.server, b.server) })
	for _, g := range groups {
		tx, err := g.db.BeginTx(ctx, nil)
		if err != nil {
			return p.lookupErr(ctx, g.rs[0], g.pl, err)
		}
		res.holds = append(res.holds, tx)
		for _, r := range g.rs {
			out, err := tx.ExecContext(ctx, fmt.Sprintf(sqlHold, r.lc.quoted[r.shard]), r.value, r.owner)
			if err != nil {
				return p.lookupErr(ctx, r, g.pl, err)
			}
			if n, _ := out.RowsAffected(); n != 1 {
				return fmt.Errorf("shardkit: %w: %s %q was taken by a concurrent write", ErrDuplicateLookup, r.lc.column, r.key)
			}
		}
	}
	return nil
}

// dropIfOrphan deletes a lookup row if it still names owner and the owner
// row does not hold its value; on the new home too when the shard moved.
func (p *Plugin) dropIfOrphan(ctx context.Context, m *model, r *reservation) error {
	err := p.dropOnce(ctx, p.router.Snapshot(), m, r)
	if moved, ok := p.movedHome(ctx, err); ok {
		err = p.dropOnce(ctx, moved, m, r)
	}
	return err
}

func (p *Plugin) dropOnce(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) error {
	db, pl, err := p.lookupDB(ctx, snap, r.shard, false)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return p.lookupErr(ctx, r, pl, err)
	}
	defer func() { _ = tx.Rollback() }()
	q := r.lc.quoted[r.shard]
	var owner int64
	err = tx.QueryRowContext(ctx, fmt.Sprintf(sqlLockRow, q), r.value).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return p.lookupErr(ctx, r, pl, err)
	}
	if owner != r.owner {
		return nil
	}
	holds, err := p.ownerHolds(ctx, m, r.lc, owner, r.value)
	if err != nil || holds {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(sqlDrop, q), r.value, owner); err != nil {
		return p.lookupErr(ctx, r, pl, err)
	}
	return tx.Commit()
}
