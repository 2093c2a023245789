package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/router"
)

// saved is the part of a statement a fan-out changes per shard.
type saved struct {
	table   string
	texpr   *clause.Expr
	conn    gorm.ConnPool
	dest    any
	rv      reflect.Value
	clauses map[string]clause.Clause
}

func save(stmt *gorm.Statement) saved {
	return saved{table: stmt.Table, texpr: stmt.TableExpr, conn: stmt.ConnPool, dest: stmt.Dest, rv: stmt.ReflectValue, clauses: maps.Clone(stmt.Clauses)}
}

func (s saved) restore(stmt *gorm.Statement) {
	stmt.Table, stmt.TableExpr, stmt.ConnPool, stmt.Dest, stmt.ReflectValue = s.table, s.texpr, s.conn, s.dest, s.rv
	stmt.Clauses = s.clauses
}

// prepare points a statement at the i-th shard of a fan-out and clears
// what the previous shard's run built. Its clauses are a copy of base
// that building changes nothing else of (ownClauses).
func (p *Plugin) prepare(db *gorm.DB, d *decision, i int, base map[string]clause.Clause) error {
	stmt := db.Statement
	stmt.SQL.Reset()
	stmt.Vars = nil
	stmt.Clauses = ownClauses(base)
	return p.bind(db, d, i)
}

// createAcross runs a Create whose rows belong to several shards: one
// INSERT per shard of the rows.
func (p *Plugin) createAcross(db *gorm.DB, d *decision) {
	defer p.atomically(db, d)()
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	ptrs := reflect.SliceOf(reflect.PointerTo(d.m.schema.ModelType))
	var total int64
	for i, shard := range d.shards {
		idx := d.rows[shard]
		group := reflect.MakeSlice(ptrs, len(idx), len(idx))
		for j, r := range idx {
			group.Index(j).Set(reflect.Indirect(s.rv.Index(r)).Addr())
		}
		if err := p.prepare(db, d, i, s.clauses); err != nil {
			fail(db, d.m, shard, err)
			return
		}
		stmt.Dest, stmt.ReflectValue = group.Interface(), group
		p.runWrite(db, p.orig.create)
		if db.Error != nil {
			p.outcome(db) // names this shard's server while the statement points there
			return
		}
		total += db.RowsAffected
	}
	db.RowsAffected = total
}

// writeAcross runs an UPDATE or DELETE (orig, GORM's own) on several
// shards: the same statement on each, rows affected summed. Rows a
// RETURNING clause reads back are collected per shard and joined, so
// that one shard's rows never become the next shard's conditions (GORM
// reads the keys of the rows in the destination as conditions).
func (p *Plugin) writeAcross(db *gorm.DB, d *decision, orig func(*gorm.DB), del bool) {
	defer p.atomically(db, d)()
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	returning, err := returnInto(stmt, s.rv)
	if err != nil {
		fail(db, d.m, -1, err)
		return
	}
	var acc reflect.Value
	if returning {
		acc = reflect.MakeSlice(s.rv.Type(), 0, s.rv.Len())
	}
	var total int64
	for i, shard := range d.shards {
		if err := p.prepare(db, d, i, s.clauses); err != nil {
			fail(db, d.m, shard, err)
			return
		}
		stmt.Dest, stmt.ReflectValue = s.dest, s.rv
		var part reflect.Value
		if returning {
			part = reflect.New(s.rv.Type())
			part.Elem().Set(reflect.AppendSlice(reflect.MakeSlice(s.rv.Type(), 0, s.rv.Len()), s.rv))
			stmt.ReflectValue = part.Elem()
			if del {
				stmt.Dest = part.Interface()
			}
		}
		p.runWrite(db, orig)
		if db.Error != nil {
			p.outcome(db)
			return
		}
		total += db.RowsAffected
		if returning {
			acc = reflect.AppendSlice(acc, part.Elem())
		}
	}
	if returning {
		s.rv.Set(acc)
	}
	db.RowsAffected = total
}

// atomically gives a multi-shard write that runs in no transaction
// (SkipDefaultTransaction) one of its own, as GORM's default transaction
// would: a part per server, all rolled back if any shard's part fails, so
// that a failed statement changes nothing. It returns the function that
// commits or rolls back. Commits across servers are not atomic together:
// a commit that fails after another server committed leaves that part.
func (p *Plugin) atomically(db *gorm.DB, d *decision) func() {
	if d.tx != nil || db.DryRun {
		return func() {}
	}
	ctx := db.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	t := &shardTx{p: p, ctx: ctx, base: p.root.ConnPool, shard: -1, statement: true, atomic: atomicOf(ctx)}
	d.tx = t
	return func() {
		d.tx = nil
		if db.Error != nil {
			_ = t.Rollback()
			return
		}
		db.AddError(t.Commit())
	}
}

// returnInto reports whether a multi-shard write reads rows back with
// RETURNING, and refuses the destinations that cannot collect them from
// several shards.
func returnInto(stmt *gorm.Statement, rv reflect.Value) (bool, error) {
	c, ok := stmt.Clauses["RETURNING"]
	if !ok {
		return false, nil
	}
	if rv.Kind() != reflect.Slice || !rv.CanSet() {
		return false, fmt.Errorf("%w: RETURNING from several shards needs a pointer to a slice to collect the rows; scope the statement to one shard", ErrUnroutableSQL)
	}
	r, _ := c.Expression.(clause.Returning)
	whole := len(r.Columns) == 0 || len(r.Columns) == 1 && r.Columns[0].Name == "*"
	if !whole && rv.Len() > 0 {
		return false, fmt.Errorf("%w: RETURNING some columns from several shards into a slice that holds rows; GORM would update those rows in place by position", ErrUnroutableSQL)
	}
	return true, nil
}

// runWrite runs one shard's write. A refusal by the source server's fence
// means the shard moved: outside a user transaction the map is reloaded
// and the write retried once on the new home; inside one, the error
// becomes ErrShardMoved.
func (p *Plugin) runWrite(db *gorm.DB, orig func(*gorm.DB)) {
	p.bounded(db, orig)
	if db.Error != nil && p.endedWrite(db, orig) {
		return
	}
	if db.Error == nil || !router.IsFenceError(db.Error) && !router.IsUndefinedTable(db.Error) && !isPrivilegeError(db.Error) && !isReadOnlyError(db.Error) {
		return
	}
	stmt := db.Statement
	m, shard, old, ok := p.movedShard(db)
	if !ok {
		return
	}
	t := txOf(stmt.ConnPool)
	moved := &ShardError{Shard: shard, Server: old, Table: m.table, Err: fmt.Errorf("%w: %w", ErrShardMoved, db.Error)}
	if t != nil && !t.statement {
		_, _ = p.router.Reload(stmt.Context)
		db.Error = moved
		return
	}
	away := old
	if isPrivilegeError(db.Error) || isReadOnlyError(db.Error) {
		// Refused by a cutover's revoke, or by a primary a switchover put
		// read-only: any unfenced home, the same server under its new
		// primary after a switchover, old again after a rollback.
		away = ""
	}
	snap, pl, err := p.awaitMove(stmt.Context, shard, away)
	if err != nil {
		db.Error = moved
		return
	}
	if !p.rerunOnHome(db, t, old, snap, pl.Server, orig) {
		db.Error = moved
		return
	}
	if db.Error != nil && router.IsFenceError(db.Error) {
		db.Error = &ShardError{Shard: shard, Server: pl.Server, Table: m.table, Err: fmt.Errorf("%w: %w", ErrShardMoved, db.Error)}
	}
}

// endedWrite runs once more a one-shard write, outside a user's
// transaction, whose pool could open no connection while the reloaded map
// shows its shard fenced. Between a switchover's read-only step and the
// promotion neither host of the server's DSN is writable, and the DSN asks
// for a writable host: a router whose map was older than the fence sent
// the write there, and it could not connect. It did nothing; it waits for
// the fence, as the writes that saw it do (at most FenceWait, or a
// switchover's lease), and runs on the pool the map then gives the
// server. It reports whether it ran the write again (db holds that run's
// outcome); a connection that failed while the shard is not fenced stands:
// the server is down.
func (p *Plugin) endedWrite(db *gorm.DB, orig func(*gorm.DB)) bool {
	stmt := db.Statement
	var ce *pgconn.ConnectError
	if !errors.As(db.Error, &ce) {
		return false
	}
	t := txOf(stmt.ConnPool)
	if t != nil && !t.statement {
		return false // the user's transaction: its other statements ran on the server as it was
	}
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		return false
	}
	snap, err := p.router.Reload(stmt.Context)
	if err != nil {
		return false
	}
	pl, err := snap.Placement(shard)
	if err != nil || pl.State != router.StateFenced {
		return false
	}
	old := pl.Server
	if snap, pl, err = p.awaitMove(stmt.Context, shard, ""); err != nil {
		return false
	}
	return p.rerunOnHome(db, t, old, snap, pl.Server, orig)
}

// rerunOnHome runs a one-shard write once more on server, the shard's home
// in snap: inside GORM's transaction around the statement (t) on that
// transaction's connection there, its connection on old dropped; else on
// the server's pool. It reports false, running nothing, when neither can
// be had.
func (p *Plugin) rerunOnHome(db *gorm.DB, t *shardTx, old string, snap *router.Snapshot, server string, orig func(*gorm.DB)) bool {
	if t != nil {
		t.drop(old)
		v, err := t.view(server, snap)
		if err != nil {
			return false
		}
		p.rerun(db, v, orig)
		return true
	}
	srv, err := p.pools.get(snap, server)
	if err != nil {
		return false
	}
	p.rerun(db, srv, orig)
	return true
}

// movedShard is the moved-shard check of a one-shard statement that
// failed on a fence's refusal or a missing table (runWrite, rerouteRead):
// the statement's model and shard, and the server it ran on (for a
// replica's pool, the one the map placed the shard on). ok is false when
// the statement is not one shard's, or when the table was missing where
// the reloaded map still puts the shard: not a move.
func (p *Plugin) movedShard(db *gorm.DB) (m *model, shard int, old string, ok bool) {
	stmt := db.Statement
	m, shard, _ = p.lookup(stmt)
	if m == nil || shard < 0 {
		return nil, 0, "", false
	}
	old = serverOf(stmt.ConnPool)
	if old == "" { // a replica's pool: the map the read was routed by
		pl, err := p.router.Snapshot().Placement(shard)
		if err != nil {
			return nil, 0, "", false
		}
		old = pl.Server
	}
	switch {
	case isReadOnlyError(db.Error):
		// A write outside a user's transaction that a read-only primary
		// refused did nothing, and runs once more on the shard's home
		// whatever the reloaded map says: the switchover that made the
		// primary read-only may have ended (the new primary recorded and
		// the fence released, or the old primary writable again) between
		// the refusal and the reload. A read-only server of the user's
		// refuses the second run as it did the first.
		if !p.homeChanged(stmt.Context, shard, old) && inUserTx(stmt) {
			return nil, 0, "", false // a read-only server or transaction of the user's
		}
	case !p.movedFrom(stmt.Context, shard, old, db.Error):
		return nil, 0, "", false // the user's own missing grant, or no move
	}
	return m, shard, old, true
}

// isPrivilegeError reports Postgres's insufficient_privilege (42501). On
// a shard's table it is what a copy that is not the shard's home answers
// the application role: a move's cutover revokes the role's privileges
// on the copy it leaves, in the transaction of its write barrier, so that
// a router with a map older than the move is refused there for reads as
// for writes. It is also a user's own missing grant: homeChanged tells
// the two apart.
func isPrivilegeError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// isReadOnlyError reports Postgres's read_only_sql_transaction (25006).
// On a write outside a transaction it is what a primary answers once a
// switchover made it read-only (failover.Switchover), before the router
// saw the server's shards fenced: the write did nothing and waits on the
// fence like the writes that saw it.
func isReadOnlyError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// homeChanged reports whether the map, reloaded from the catalog, has the
// shard elsewhere than old or under a move (moving or fenced): only then
// is a refused privilege the old home's refusal rather than a grant the
// application lacks.
func (p *Plugin) homeChanged(ctx context.Context, shard int, old string) bool {
	snap, err := p.router.Reload(ctx)
	if err != nil {
		return false
	}
	pl, err := snap.Placement(shard)
	return err == nil && (pl.Server != old || pl.State != router.StateActive)
}

// rerun runs a statement again on conn, without the text and arguments
// its failed run built.
func (p *Plugin) rerun(db *gorm.DB, conn gorm.ConnPool, run func(*gorm.DB)) {
	stmt := db.Statement
	stmt.ConnPool = conn
	db.Error = nil
	stmt.SQL.Reset()
	stmt.Vars = nil
	p.bounded(db, run)
}

// movedAway reports whether the current map, reloaded from the catalog,
// places the shard on a server other than old. A write that found no
// table on old then met a schema that a move's rollback dropped right
// after flipping the shard back (the old home keeps no fence to refuse
// it): the statement did nothing there, and runs again on the shard's
// home like a write the fence refused.
func (p *Plugin) movedAway(ctx context.Context, shard int, old string) bool {
	snap, err := p.router.Reload(ctx)
	if err != nil {
		return false
	}
	pl, err := snap.Placement(shard)
	return err == nil && pl.Server != old
}

// awaitMove reloads the map until the shard has left server old and is
// not fenced, for at most FenceWait, or, while the shard is under a
// switchover's fence, its lease (switchoverLease). It wakes on each
// snapshot the router installs (a watching router hears of the flip at
// once), and reloads every 20 ms in case it does not.
func (p *Plugin) awaitMove(ctx context.Context, shard int, old string) (*router.Snapshot, router.Placement, error) {
	changed, stop := p.router.Subscribe()
	defer stop()
	deadline := time.Now().Add(max(p.cfg.FenceWait, 0))
	snap, err := p.router.Reload(ctx)
	for {
		if err != nil {
			return nil, router.Placement{}, err
		}
		pl, perr := snap.Placement(shard)
		if perr != nil {
			return nil, pl, perr
		}
		if pl.Server != old && pl.State != router.StateFenced {
			return snap, pl, nil
		}
		if time.Now().After(deadline) {
			d := time.Duration(0)
			if pl.State == router.StateFenced {
				d = p.switchoverLease(ctx, shard)
			}
			if d <= 0 {
				return nil, pl, ErrShardMoved
			}
			deadline = time.Now().Add(d)
		}
		select {
		case <-ctx.Done():
			return nil, pl, ctx.Err()
		case <-changed:
			snap, err = p.router.Snapshot(), nil
		case <-time.After(20 * time.Millisecond):
			snap, err = p.router.Reload(ctx)
		}
	}
}

// serverOf names the server behind a routed connection.
func serverOf(cp gorm.ConnPool) string {
	switch c := cp.(type) {
	case *serverDB:
		return c.name
	case *txView:
		return c.server
	}
	return ""
}

// rerouteRead runs a one-shard read once more on the shard's home when it
// found no table where a stale map placed the shard and the reloaded map
// places it elsewhere: the copy a rollback dropped right after flipping
// the shard back (see movedAway). The read returned nothing there. Inside
// a transaction, or with the map unchanged, the error stands. A read
// refused its privilege goes to refusedRead, one whose connection ended
// to endedRead.
func (p *Plugin) rerouteRead(db *gorm.DB) {
	if db.Error == nil {
		return
	}
	if isPrivilegeError(db.Error) {
		p.refusedRead(db)
		return
	}
	if unavailable(db.Error) || errors.Is(db.Error, errPoolClosed) {
		p.endedRead(db)
		return
	}
	if !router.IsUndefinedTable(db.Error) || txOf(db.Statement.ConnPool) != nil {
		return
	}
	stmt := db.Statement
	_, shard, _, ok := p.movedShard(db)
	if !ok {
		return
	}
	snap := p.router.Snapshot()
	pl, err := snap.Placement(shard)
	if err != nil {
		return
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return
	}
	p.rerun(db, p.conn(stmt, srv, true), p.runQuery)
}

// endedRead runs a one-shard read outside a transaction once more when
// its connection ended under it (57P01, a connection closed), or its pool
// was closed, and the map, reloaded, no longer gives the server the DSNs
// or the primary its pool was opened with: a switchover's sessions step
// ends the sessions left on the old primary once it recorded the new
// one, and a router whose map was older than the record can have sent a
// read there just before; the first statement routed by a newer map
// closes the old pool (pools.get) under a read routed by an older one
// that has not taken a connection yet. The read runs on the server's
// pool for the reloaded map. On a pool the map still gives the server, a
// connection that could not be opened while the shard is fenced waits
// for the fence, then the read runs again; any other ended connection
// stands: the server is down, and the read fails as the server's.
func (p *Plugin) endedRead(db *gorm.DB) {
	stmt := db.Statement
	s, ok := stmt.ConnPool.(*serverDB)
	if !ok {
		return // in a transaction, or on a replica's pool
	}
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		return
	}
	snap, err := p.router.Reload(stmt.Context)
	if err != nil {
		return
	}
	srv, inMap := snap.Server(s.name)
	if !inMap {
		return
	}
	pl, err := snap.Placement(shard)
	if err != nil {
		return
	}
	if s.sameDSNs(srv) {
		// The pool is the one the map gives the server. One that could
		// open no connection while the shard is fenced met a switchover
		// between its read-only step and the promotion: neither host is
		// writable, and the DSN asks for a writable host. The read waits,
		// as a write does, for the fence to end (the new primary recorded,
		// or the old one writable again).
		var ce *pgconn.ConnectError
		if pl.State != router.StateFenced || !errors.As(db.Error, &ce) {
			return
		}
		if snap, pl, err = p.awaitMove(stmt.Context, shard, ""); err != nil {
			return
		}
	}
	now, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return
	}
	p.rerun(db, p.conn(stmt, now, true), p.runQuery)
}

// errPoolClosed is database/sql's error for a statement on a closed
// *sql.DB, which it does not export.
var errPoolClosed = func() error {
	db := sql.OpenDB(closedConnector{})
	_ = db.Close()
	_, err := db.Conn(context.Background())
	return err
}()

// closedConnector is the driver.Connector of the *sql.DB errPoolClosed
// closes before it connects.
type closedConnector struct{}

func (closedConnector) Connect(context.Context) (driver.Conn, error) { return nil, driver.ErrBadConn }
func (closedConnector) Driver() driver.Driver                        { return nil }

// runRow runs gorm:row on one shard. A statement that joins other tables
// runs, as runQuery's does, in a read-only transaction with the shard's
// schema on its search_path, so that a joined table resolves in the
// shard's schema and not in public. The transaction ends before GORM's
// caller reads the rows, so they are read whole inside it and served
// from memory (internal/memrows), as a read across shards serves its
// merged rows.
func (p *Plugin) runRow(db *gorm.DB) {
	stmt := db.Statement
	if !joinsTables(stmt) || db.DryRun || db.Error != nil {
		p.orig.row(db)
		return
	}
	pool, ok := stmt.ConnPool.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		p.orig.row(db) // a transaction: pinned, search_path already set
		return
	}
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		p.orig.row(db)
		return
	}
	many, _ := db.Get("rows")
	p.bounded(db, func(db *gorm.DB) { p.rowsInSchema(db, pool, m, shard) })
	switch {
	case db.Error != nil && many != true:
		stmt.Dest = memrows.ErrRow(db.Error)
	case db.Error != nil:
	case many == true:
		rows, err := memrows.Query(stmt.Context, stmt.Dest.(*memrows.Rows))
		if err != nil {
			db.AddError(err)
			return
		}
		stmt.Dest = rows
	default:
		stmt.Dest = memrows.QueryRow(stmt.Context, stmt.Dest.(*memrows.Rows))
	}
}

// rowsInSchema runs gorm:row's query on shard in a read-only transaction
// of pool with the shard's schema on its search_path, and leaves its rows
// read whole as the statement's Dest (*memrows.Rows).
func (p *Plugin) rowsInSchema(db *gorm.DB, pool interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, m *model, shard int) {
	stmt := db.Statement
	tx, err := pool.BeginTx(stmt.Context, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		fail(db, m, shard, err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(stmt.Context, setSearchPath, pgx.Identifier{router.SchemaName(shard)}.Sanitize()); err != nil {
		fail(db, m, shard, err)
		return
	}
	cp := stmt.ConnPool
	stmt.ConnPool = tx
	stmt.Settings.Store("rows", true) // gorm:row's *sql.Rows, read here
	p.orig.row(db)
	stmt.ConnPool = cp
	if db.Error != nil {
		return
	}
	rows, ok := stmt.Dest.(*sql.Rows)
	if !ok {
		db.AddError(fmt.Errorf("shardkit: gorm:row left %T, want *sql.Rows", stmt.Dest))
		return
	}
	pt, err := scanAll(rows)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		fail(db, m, shard, err)
		return
	}
	stmt.Dest = pt.memRows()
}

// refusedRead handles a one-shard read that the server refused for want
// of privilege, when that is a move's doing (movedShard): the old home of
// a shard that moved, or a copy whose cutover is under way. Outside a
// transaction the read waits, like a write, for the shard to have a home
// that is not fenced (at most FenceWait) and runs once more there; inside
// one it fails with ErrShardMoved (retriable), the map reloaded. A
// refusal the map does not explain stands as it is.
func (p *Plugin) refusedRead(db *gorm.DB) {
	stmt := db.Statement
	m, shard, old, ok := p.movedShard(db)
	if !ok {
		return
	}
	moved := &ShardError{Shard: shard, Server: old, Table: m.table, Err: fmt.Errorf("%w: %w", ErrShardMoved, db.Error)}
	if txOf(stmt.ConnPool) != nil {
		db.Error = moved
		return
	}
	// Any server will do once the shard is not fenced: a rollback may have
	// brought the shard back to old, which grants the role again.
	snap, pl, err := p.awaitMove(stmt.Context, shard, "")
	if err != nil {
		db.Error = moved
		return
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		db.Error = moved
		return
	}
	p.rerun(db, p.conn(stmt, srv, true), p.runQuery)
}

func (p *Plugin) runQuery(db *gorm.DB) {
	stmt := db.Statement
	if !joinsTables(stmt) || db.DryRun || db.Error != nil {
		p.orig.query(db)
		return
	}
	pool, ok := stmt.ConnPool.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		p.orig.query(db) // a transaction: pinned, search_path already set
		return
	}
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		p.orig.query(db)
		return
	}
	tx, err := pool.BeginTx(stmt.Context, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		fail(db, m, shard, err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(stmt.Context, setSearchPath, pgx.Identifier{router.SchemaName(shard)}.Sanitize()); err != nil {
		fail(db, m, shard, err)
		return
	}
	cp := stmt.ConnPool
	stmt.ConnPool = tx
	p.orig.query(db)
	stmt.ConnPool = cp
	if db.Error == nil {
		db.AddError(tx.Commit())
	}
}

// oneShardOpts is what a statement's connection is to do with it
// (stmtOpts), and whether that connection bounds it (a connection of the
// plugin's own, unnamedConn). It runs prepared when GORM builds its text
// (a raw text may be any of a user's), it is one shard's, its server's
// primary pool runs named statements (PreparedReads), and it is a read or
// a write whose text and result stay the same from run to run
// (preparedWrite); it is bounded by bound when the connection can.
func (p *Plugin) oneShardOpts(stmt *gorm.Statement, bound time.Duration) (stmtOpts, bool) {
	var s *serverDB
	switch c := stmt.ConnPool.(type) {
	case *serverDB:
		s = c
	case *txView:
		p.pools.mu.RLock()
		s = p.pools.by[c.server]
		p.pools.mu.RUnlock()
	}
	if s == nil || !s.unnamed {
		return stmtOpts{}, false
	}
	o := stmtOpts{bound: bound}
	if s.named && stmt.SQL.Len() == 0 {
		o.write = preparedWrite(stmt)
		if o.write || reads(stmt) {
			m, shard, _ := p.lookup(stmt)
			o.prepare = m != nil && shard >= 0
		}
	}
	return o, true
}

// preparedWrite reports whether a one-shard write runs prepared: an
// INSERT of one row, an UPDATE or a DELETE, returning nothing or named
// columns. An INSERT of many rows has a text for each count of rows,
// which would fill the connection's cache with texts run once; RETURNING
// every column (clause.Returning{}) changes its result under a column
// added to the table, which a prepared statement inside a transaction,
// as GORM runs a write, cannot run past.
func preparedWrite(stmt *gorm.Statement) bool {
	if len(stmt.BuildClauses) == 0 {
		return false
	}
	switch stmt.BuildClauses[0] {
	case "INSERT":
		if rv := stmt.ReflectValue; (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) && rv.Len() != 1 {
			return false
		}
	case "UPDATE", "DELETE":
	default:
		return false
	}
	if c, ok := stmt.Clauses["RETURNING"]; ok {
		r, ok := c.Expression.(clause.Returning)
		if !ok || len(r.Columns) == 0 {
			return false
		}
		for _, col := range r.Columns {
			if col.Name == "*" || col.Raw {
				return false
			}
		}
	}
	return true
}

// reads reports whether GORM runs the statement as a query (Find, First,
// Take…): its clauses begin with SELECT.
func reads(stmt *gorm.Statement) bool {
	return len(stmt.BuildClauses) > 0 && stmt.BuildClauses[0] == "SELECT"
}
