package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/internal/memrows"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

type op uint8

const (
	opCreate op = iota + 1
	opQuery
	opUpdate
	opDelete
	opRow
	opRaw
)

func (o op) read() bool { return o == opQuery || o == opRow }

// ours reports whether a connection is the plugin's own (possibly under
// GORM's PrepareStmt wrapper).
func (p *Plugin) ours(cp gorm.ConnPool) bool {
	switch c := cp.(type) {
	case *rootPool:
		return true
	case *gorm.PreparedStmtDB:
		return c.ConnPool == gorm.ConnPool(p.root)
	}
	return false
}

// fail records a routing error on the statement.
func fail(db *gorm.DB, m *model, shard int, err error) {
	db.AddError(shardFailure(m, shard, err))
}

// failRow records err and, for a Row statement, leaves an error row as
// its result: GORM's Row() returns a nil *sql.Row when a callback failed,
// and Row().Scan would then panic; the error row's Scan reports the
// refusal.
func failRow(db *gorm.DB, o op, m *model, shard int, err error) {
	fail(db, m, shard, err)
	if o == opRow {
		if v, ok := db.Get("rows"); ok && v == false {
			db.Statement.Dest = memrows.ErrRow(db.Error)
		}
	}
}

// route is shardkit:route for one kind of statement. It decides, once,
// where the statement runs (see decision), then points a one-shard
// statement at its shard's schema and server (or the transaction's part
// there), or leaves a multi-shard decision for the executor.
func (p *Plugin) route(db *gorm.DB, o op) {
	observed := p.observed.Load()
	if observed {
		db.Statement.Settings.Delete(routedKey) // a record copied from an earlier statement
	}
	if db.Error != nil {
		return
	}
	stmt := db.Statement
	if o == opRaw || stmt.SQL.Len() > 0 {
		delete(stmt.Clauses, planName) // a plan left by a failed earlier run
		p.routeRaw(db)
		if observed {
			p.recordRaw(db)
		}
		return
	}
	// The decision lives on this frame; only a multi-shard one, which
	// the executor reads, is copied to the heap.
	var d decision
	sharded, err := p.decide(db, o, &d)
	if sharded {
		// A chain shared after Session shares its WHERE's list with every
		// statement run from it, and GORM's build reorders that list in
		// place: this statement builds its own.
		if c, ok := stmt.Clauses["WHERE"]; ok {
			if w, ok := c.Expression.(clause.Where); ok && reorders(w) {
				c.Expression = ownWhere(w)
				stmt.Clauses["WHERE"] = c
			}
		}
	}
	if err == nil && sharded && len(d.shards) == 1 {
		if !d.read && p.alone(db, o, d.m, d.tx) {
			// On the shard's server, as under SkipDefaultTransaction;
			// GORM's commit ends the transaction (onFinish).
			d.tx.runAlone()
			stmt.Clauses[aloneName] = clause.Clause{Expression: (*aloneTx)(d.tx)}
			stmt.ConnPool, d.tx = p.root, nil
		}
		err = p.bind(db, &d, 0)
	}
	if observed && (sharded || err != nil) {
		record(stmt, &d)
	}
	if err != nil {
		shard := -1
		if len(d.shards) == 1 {
			shard = d.shards[0]
		}
		if o == opCreate && errors.Is(err, ErrCrossShard) {
			err = fmt.Errorf("%w%s", err, createAcrossHint)
		}
		failRow(db, o, d.m, shard, err)
		return
	}
	if sharded && len(d.shards) > 1 {
		plan := new(decision)
		*plan = d
		stmt.Clauses[planName] = clause.Clause{Expression: plan}
	}
}

// createAcrossHint ends ErrCrossShard for a Create in a transaction: the
// usual cause is CreateInBatches, which wraps its batches in one.
const createAcrossHint = "; to create rows of several shards, create them outside a transaction " +
	"(for CreateInBatches, which opens one around its batches: db.Session(&gorm.Session{SkipDefaultTransaction: true}).CreateInBatches(...))"

// txOf returns the shardTx behind a statement's connection, if any.
func txOf(cp gorm.ConnPool) *shardTx {
	switch c := cp.(type) {
	case *shardTx:
		return c
	case *txView:
		return c.t
	case *gorm.PreparedStmtTX:
		return txOf(c.Tx)
	}
	return nil
}

// unsharded gives a statement on an unregistered table back the default
// connection when it inherited a shard server's from a parent statement.
// It refuses one in a user transaction that has a shard's part and may
// not span (see ErrMixedTransaction).
func (p *Plugin) unsharded(stmt *gorm.Statement) error {
	switch c := stmt.ConnPool.(type) {
	case *serverDB:
		stmt.ConnPool = p.root
	case *txView:
		stmt.ConnPool = c.t
	}
	if t := txOf(stmt.ConnPool); t != nil && !t.spans() {
		if _, _, ok := savepointSQL(stmt.SQL.String()); ok {
			return nil // goes to every part the transaction has (savepoint.go)
		}
		if shard, server := t.pinned(); shard >= 0 {
			return &ShardError{Shard: shard, Server: server, Err: ErrMixedTransaction}
		}
	}
	return nil
}

// bind points a statement at the i-th shard of its decision: the
// shard's schema, and its server's pool or the transaction's part there.
func (p *Plugin) bind(db *gorm.DB, d *decision, i int) error {
	stmt := db.Statement
	shard, pl := d.shards[i], d.placement(i)
	if d.tx == nil {
		if _, inTx := stmt.ConnPool.(gorm.TxCommitter); inTx {
			// A transaction the plugin did not begin (a *sql.Tx passed
			// in): routing would escape it.
			return fmt.Errorf("%w: the statement runs in a transaction not begun through the plugin's connection", ErrUnroutableSQL)
		}
	}
	stmt.Table, stmt.TableExpr = d.m.table, &d.m.exprs[shard]
	if d.tx == nil {
		srv, err := p.pools.get(d.snap, pl.Server)
		if err != nil {
			return err
		}
		if srv.downFor(p.cfg.ServerRetry) {
			return &ServerError{Server: srv.name, Shards: []int{shard}, Table: d.m.table, Err: errKnownDown}
		}
		stmt.ConnPool = p.conn(stmt, srv, d.read)
		return nil
	}
	var v *txView
	var err error
	if d.tx.spans() {
		v, err = d.tx.view(pl.Server, d.snap)
	} else {
		v, err = d.tx.pin(shard, pl, d.snap)
	}
	var se *ServerError
	if errors.As(err, &se) {
		if se.Shards == nil {
			se.Shards = []int{shard}
		}
		if se.Table == "" {
			se.Table = d.m.table
		}
	}
	if err != nil {
		return err
	}
	stmt.ConnPool = v
	return nil
}

// conn picks a server's primary or one of its replicas.
func (p *Plugin) conn(stmt *gorm.Statement, srv *serverDB, read bool) gorm.ConnPool {
	if !read || len(srv.replicas) == 0 {
		return srv
	}
	if _, ok := stmt.Settings.Load(dbresolverWrite); ok {
		return srv
	}
	if _, locking := stmt.Clauses["FOR"]; locking {
		return srv
	}
	return p.cfg.ReplicaPolicy.Resolve(srv.replicas)
}

// waitFence holds a write to a fenced shard until the map shows it
// unfenced, or FenceWait passes, or, for a switchover's fence, its lease
// (switchoverLease). It wakes on each new snapshot the router installs
// (Router.Watch), so the write goes on as soon as the map does.
func (p *Plugin) waitFence(ctx context.Context, shard int) (*router.Snapshot, router.Placement, error) {
	// Subscribe before reading the snapshot: a snapshot installed in
	// between still arrives on the channel.
	changed, stop := p.router.Subscribe()
	defer stop()
	var timeout <-chan time.Time
	var t *time.Timer
	if p.cfg.FenceWait > 0 {
		t = time.NewTimer(p.cfg.FenceWait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		snap := p.router.Snapshot()
		pl, err := snap.Placement(shard)
		if err != nil {
			return snap, pl, err
		}
		if pl.State != router.StateFenced {
			return snap, pl, nil
		}
		if timeout == nil {
			return snap, pl, &ShardError{Shard: shard, Server: pl.Server, Err: ErrShardFenced}
		}
		select {
		case <-ctx.Done():
			return snap, pl, ctx.Err()
		case <-timeout:
			if d := p.switchoverLease(ctx, shard); d > 0 {
				t.Reset(d)
				continue
			}
			timeout = nil // one last look at the map, then ErrShardFenced
		case <-changed:
		}
	}
}

// switchoverLeases is a map source that says what is left of the lease
// of a switchover's fence on a shard (catalog.Catalog).
type switchoverLeases interface {
	SwitchoverLease(ctx context.Context, shard int) (time.Duration, error)
}

// switchoverLease is how much longer a write held by the fence on shard
// may wait once FenceWait passed: what is left of the fence's lease when
// the fence is a switchover's (failover.Switchover, whose steps may
// outlast a move's cutover, and whose writes are to wait rather than
// fail), else 0: a move's fence, a map source that does not say (a
// relay's, a map made by hand), or a catalog that could not be read.
// It asks the catalog once per wait that outlasts FenceWait, and again
// only once the lease it read has passed.
func (p *Plugin) switchoverLease(ctx context.Context, shard int) time.Duration {
	r, ok := p.router.(interface{ Source() router.Source })
	if !ok {
		return 0
	}
	src, ok := r.Source().(switchoverLeases)
	if !ok {
		return 0
	}
	d, err := src.SwitchoverLease(ctx, shard)
	if err != nil {
		return 0
	}
	return d
}
