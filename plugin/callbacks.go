package plugin

import (
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// Where GORM enters the plugin: every callback is registered here, and
// each entry point hands the statement to the file of its concern.

// The names under which the plugin keeps state on a statement.
const (
	// scopeName is the statement clause under which a scope is kept; it
	// is never built into SQL.
	scopeName = "shardkit:scope"
	// planName is the statement clause holding a multi-shard decision,
	// from shardkit:route to the executor.
	planName = "shardkit:plan"
	// partialName is the statement clause holding a Partial scope.
	partialName = "shardkit:partial"
	// lookupSettings is the statement setting holding a write's
	// reservation of lookup values, from lookup_reserve to lookup_release.
	lookupSettings = "shardkit:lookup"
	// routedKey is the statement setting holding a *routeRecord (Observe).
	routedKey = "shardkit:routed"
	// aloneName is the statement clause holding GORM's transaction
	// around a write that runs without it (alone.go), from shardkit:route
	// to its commit.
	aloneName = "shardkit:alone"
	// dbresolverWrite is the statement setting dbresolver.Write stores.
	dbresolverWrite = "gorm:db_resolver:write"
)

func (p *Plugin) registerCallbacks(db *gorm.DB) error {
	cb := db.Callback()
	p.orig = originals{
		begin:  cb.Create().Get("gorm:begin_transaction"),
		create: cb.Create().Get("gorm:create"),
		query:  cb.Query().Get("gorm:query"),
		update: cb.Update().Get("gorm:update"),
		delete: cb.Delete().Get("gorm:delete"),
		row:    cb.Row().Get("gorm:row"),
		finish: cb.Create().Get("gorm:commit_or_rollback_transaction"),
	}
	if p.orig.begin == nil || p.orig.create == nil || p.orig.query == nil || p.orig.update == nil || p.orig.delete == nil || p.orig.row == nil {
		return errors.New("shardkit: GORM's default callbacks are missing; register the plugin on a gorm.DB from gorm.Open")
	}
	steps := []struct {
		name string
		err  error
	}{
		{"create begin", cb.Create().Replace("gorm:begin_transaction", p.onBegin)},
		{"update begin", cb.Update().Replace("gorm:begin_transaction", p.onBegin)},
		{"delete begin", cb.Delete().Replace("gorm:begin_transaction", p.onBegin)},
		{"create finish", cb.Create().Replace("gorm:commit_or_rollback_transaction", p.onFinish)},
		{"update finish", cb.Update().Replace("gorm:commit_or_rollback_transaction", p.onFinish)},
		{"delete finish", cb.Delete().Replace("gorm:commit_or_rollback_transaction", p.onFinish)},
		{"assign_id", cb.Create().After("gorm:before_create").Before("gorm:save_before_associations").Register("shardkit:assign_id", p.onAssignID)},
		{"create route", cb.Create().After("shardkit:assign_id").Before("gorm:create").Register("shardkit:route", p.onRoute(opCreate))},
		{"create", cb.Create().Replace("gorm:create", p.onCreate)},
		{"query route", cb.Query().Before("gorm:query").Register("shardkit:route", p.onRoute(opQuery))},
		{"query", cb.Query().Replace("gorm:query", p.onQuery)},
		{"update route", cb.Update().After("gorm:before_update").Before("gorm:update").Register("shardkit:route", p.onRoute(opUpdate))},
		{"update", cb.Update().Replace("gorm:update", p.onUpdate)},
		{"delete route", cb.Delete().After("gorm:before_delete").Before("gorm:delete").Register("shardkit:route", p.onRoute(opDelete))},
		{"delete", cb.Delete().Replace("gorm:delete", p.onDelete)},
		{"row route", cb.Row().Before("gorm:row").Register("shardkit:route", p.onRoute(opRow))},
		{"row", cb.Row().Replace("gorm:row", p.onRow)},
		{"raw route", cb.Raw().Before("gorm:raw").Register("shardkit:route", p.onRoute(opRaw))},
		{"create lookup reserve", cb.Create().After("shardkit:assign_id").Before("shardkit:route").Register("shardkit:lookup_reserve", p.onLookupReserveCreate)},
		{"update lookup reserve", cb.Update().After("gorm:before_update").Before("shardkit:route").Register("shardkit:lookup_reserve", p.onLookupReserveUpdate)},
		{"create lookup release", cb.Create().After("*").Register("shardkit:lookup_release", p.onLookupRelease)},
		{"update lookup release", cb.Update().After("*").Register("shardkit:lookup_release", p.onLookupRelease)},
		{"delete lookup release", cb.Delete().After("*").Register("shardkit:lookup_release", p.onLookupReleaseDelete)},
		{"create outcome", cb.Create().After("gorm:create").Register("shardkit:outcome", p.onOutcome)},
		{"query outcome", cb.Query().After("gorm:query").Register("shardkit:outcome", p.onOutcome)},
		{"update outcome", cb.Update().After("gorm:update").Register("shardkit:outcome", p.onOutcome)},
		{"delete outcome", cb.Delete().After("gorm:delete").Register("shardkit:outcome", p.onOutcome)},
		{"row outcome", cb.Row().After("gorm:row").Register("shardkit:outcome", p.onOutcome)},
		{"raw outcome", cb.Raw().After("gorm:raw").Register("shardkit:outcome", p.onOutcome)},
	}
	for _, s := range steps {
		if s.err != nil {
			return fmt.Errorf("shardkit: register %s callback: %w", s.name, s.err)
		}
	}
	return nil
}

// poison makes every statement on db fail with the plugin's set-up error.
func poison(db *gorm.DB, cause error) {
	err := fmt.Errorf("shardkit: %w: %w", ErrNotInitialized, cause)
	fail := func(db *gorm.DB) { db.AddError(err) }
	cb := db.Callback()
	_ = cb.Create().Before("*").Register("shardkit:not_initialized", fail)
	_ = cb.Query().Before("*").Register("shardkit:not_initialized", fail)
	_ = cb.Update().Before("*").Register("shardkit:not_initialized", fail)
	_ = cb.Delete().Before("*").Register("shardkit:not_initialized", fail)
	_ = cb.Row().Before("*").Register("shardkit:not_initialized", fail)
	_ = cb.Raw().Before("*").Register("shardkit:not_initialized", fail)
}

// onBegin wraps gorm:begin_transaction: a transaction GORM starts around
// one statement is marked so that it may span that statement's shards.
// A sharded statement whose connection another plugin switched (a
// dbresolver registered before this plugin picks the default source) gets
// the plugin's connection back first, so that its transaction is one the
// plugin can route.
func (p *Plugin) onBegin(db *gorm.DB) {
	stmt := db.Statement
	_, wasTx := stmt.ConnPool.(gorm.TxCommitter)
	if !wasTx && !p.ours(stmt.ConnPool) {
		if m, _, _ := p.lookup(stmt); m != nil {
			stmt.ConnPool = p.root
		}
	}
	p.orig.begin(db)
	if t := txOf(stmt.ConnPool); t != nil && !wasTx {
		t.statement = true
	}
}

// onFinish wraps gorm:commit_or_rollback_transaction. GORM adds the
// error of a rollback after a failed statement to the statement's as
// text ("%v; %w"), which leaves the caller only the rollback's error to
// test: a *ServerError or a constraint violation becomes an untyped
// string. The statement's error stays what the caller tests (a
// *rollbackError), the rollback's in its text.
func (p *Plugin) onFinish(db *gorm.DB) {
	if c, ok := db.Statement.Clauses[aloneName]; ok {
		delete(db.Statement.Clauses, aloneName)
		if srv, ok := db.Statement.ConnPool.(*serverDB); ok {
			// The server's health, which a BEGIN would have reported:
			// GORM runs a Create's shardkit:outcome after this.
			srv.report(db.Error, p.cfg.ServerRetry)
		}
		if t, ok := c.Expression.(*aloneTx); ok {
			db.Statement.ConnPool = (*shardTx)(t) // ends with nothing to commit
		}
	}
	before := db.Error
	if p.orig.finish != nil {
		p.orig.finish(db)
	}
	if before == nil || db.Error == before {
		return
	}
	db.Error = &rollbackError{Err: before, Rollback: errors.Unwrap(db.Error)}
	if db.Statement.Result != nil {
		db.Statement.Result.Error = db.Error
	}
}

// rollbackError is a statement's error whose transaction's rollback failed
// too. It unwraps to the statement's error alone: what the caller tests
// (errors.Is, errors.As, Retryable) is why the statement failed; the
// rollback's failure adds nothing to act on, since a transaction whose
// rollback failed ends with its connection, and the server rolls it back.
type rollbackError struct {
	Err      error // the statement's
	Rollback error // the rollback's
}

func (e *rollbackError) Error() string {
	return fmt.Sprintf("%v (the transaction's rollback failed too: %v; the server rolls back a transaction whose connection ended)", e.Err, e.Rollback)
}

// Unwrap returns the statement's error.
func (e *rollbackError) Unwrap() error { return e.Err }

// onAssignID is shardkit:assign_id (assign.go).
func (p *Plugin) onAssignID(db *gorm.DB) { p.assignID(db) }

// onRoute returns shardkit:route for one kind of statement (route.go).
func (p *Plugin) onRoute(o op) func(*gorm.DB) {
	return func(db *gorm.DB) { p.route(db, o) }
}

// onCreate replaces gorm:create: a one-shard statement as GORM runs it
// (retried on the shard's new home if it moved), or one INSERT per
// shard of the rows (exec.go).
func (p *Plugin) onCreate(db *gorm.DB) {
	if d := takePlan(db.Statement); d != nil {
		p.createAcross(db, d)
		return
	}
	p.runWrite(db, p.orig.create)
}

// onQuery replaces gorm:query: one shard as usual (inside a read-only
// transaction with the shard's search_path when the query joins other
// tables), or a read of several shards planned, run and merged
// (read.go and its stages, see doc.go).
func (p *Plugin) onQuery(db *gorm.DB) {
	if d := takePlan(db.Statement); d != nil {
		p.fanoutQuery(db, d)
		return
	}
	p.bounded(db, p.runQuery)
	p.rerouteRead(db)
}

// onRow replaces gorm:row (Row, Rows, and Scan, which reads Rows): one
// shard as GORM runs it (with the shard's search_path when it joins
// other tables, exec.go), or a read of several shards planned, run and
// merged as Find's, its merged rows served as *sql.Rows or *sql.Row
// (read_scan_rows.go).
func (p *Plugin) onRow(db *gorm.DB) {
	if d := takePlan(db.Statement); d != nil {
		p.rowsAcross(db, d)
		return
	}
	p.runRow(db)
}

// onUpdate replaces gorm:update (exec.go).
func (p *Plugin) onUpdate(db *gorm.DB) {
	if d := takePlan(db.Statement); d != nil {
		p.writeAcross(db, d, p.orig.update, false)
		return
	}
	p.runWrite(db, p.orig.update)
}

// onDelete replaces gorm:delete (exec.go).
func (p *Plugin) onDelete(db *gorm.DB) {
	if d := takePlan(db.Statement); d != nil {
		p.writeAcross(db, d, p.orig.delete, true)
		return
	}
	p.runWrite(db, p.orig.delete)
}

// onLookupReserveCreate is shardkit:lookup_reserve of Create: it claims
// and holds the lookup values of the new rows before they are written
// (lookupwrite.go).
func (p *Plugin) onLookupReserveCreate(db *gorm.DB) { p.lookupReserveCreate(db) }

// onLookupReserveUpdate is shardkit:lookup_reserve of Update: an UPDATE
// that sets a lookup column claims and holds the new value (lookupwrite.go).
func (p *Plugin) onLookupReserveUpdate(db *gorm.DB) { p.lookupReserveUpdate(db) }

// onLookupRelease is shardkit:lookup_release of Create and Update, after
// the statement's commit or rollback (lookupwrite.go).
func (p *Plugin) onLookupRelease(db *gorm.DB) { p.lookupRelease(db) }

// onLookupReleaseDelete is shardkit:lookup_release of Delete: it drops
// the lookup rows of the deleted rows (lookupwrite.go).
func (p *Plugin) onLookupReleaseDelete(db *gorm.DB) { p.lookupCleanupDelete(db) }

// onOutcome is shardkit:outcome, after each chain's executor: it names
// the server a failed statement could not reach and records the
// server's health (health.go).
func (p *Plugin) onOutcome(db *gorm.DB) { p.outcome(db) }

// takePlan removes and returns a statement's multi-shard decision.
func takePlan(stmt *gorm.Statement) *decision {
	c, ok := stmt.Clauses[planName]
	if !ok {
		return nil
	}
	delete(stmt.Clauses, planName)
	d, _ := c.Expression.(*decision)
	return d
}
