package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin/internal/readexec"
	"github.com/shardkit/shardkit/router"
)

// shardTx is a transaction as GORM sees it. It opens real transactions
// lazily: on the server of the first sharded statement (or of the Shard
// scope it was begun with), and on the default connection for unsharded
// statements. A user transaction is pinned to one logical shard; GORM's own
// per-statement transaction (around a Create, Update or Delete) may span
// the shards of that one statement.
type shardTx struct {
	p    *Plugin
	ctx  context.Context
	opts *sql.TxOptions
	base gorm.ConnPool

	mu         sync.Mutex
	shard      int    // pinned logical shard, -1: none yet
	server     string // server of the pinned shard
	statement  bool   // GORM's own transaction around one statement
	atomic     bool   // begun under plugin.Atomic: spans shards, commits by 2PC
	txs        []*txView
	def        gorm.ConnPool // transaction on the default connection
	done       bool
	savepoints []string      // live savepoints, oldest first
	fenceWait  time.Duration // waited on a fence before it began; its first write reports it
	// alone: GORM's transaction around one statement whose write ran
	// without it (see alone.go); it ends with nothing to commit.
	alone bool
}

// txView is the part of a shardTx on one server. Statements routed there
// use it as their ConnPool; committing it commits the whole shardTx.
var _ gorm.Tx = (*shardTx)(nil)

type txView struct {
	*sql.Tx
	t      *shardTx
	server string
}

// Commit is part of gorm.TxCommitter: it commits the whole transaction.
func (v *txView) Commit() error { return v.t.Commit() }

// Rollback is part of gorm.TxCommitter: it rolls back the whole transaction.
func (v *txView) Rollback() error { return v.t.Rollback() }

// setSearchPath sets a transaction's search_path to one sanitized schema.
const setSearchPath = readexec.SetSearchPath

// pin binds the transaction to a logical shard whose home the statement's
// decision found: it begins on that server and sets search_path to the
// shard's schema for raw SQL.
func (t *shardTx) pin(shard int, pl router.Placement, snap *router.Snapshot) (*txView, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shard >= 0 {
		if t.shard != shard {
			return nil, &ShardError{Shard: shard, Server: t.server, Err: ErrCrossShard}
		}
		return t.viewLocked(t.server, snap)
	}
	v, err := t.viewLocked(pl.Server, snap)
	var se *ServerError
	if errors.As(err, &se) && se.Shards == nil {
		se.Shards = []int{shard}
	}
	if err != nil {
		return nil, err
	}
	path := pgx.Identifier{pl.Schema}.Sanitize()
	if _, err := v.Tx.ExecContext(t.ctx, setSearchPath, path); err != nil {
		return nil, &ShardError{Shard: shard, Server: pl.Server, Err: fmt.Errorf("set search_path: %w", err)}
	}
	t.shard, t.server = shard, pl.Server
	return v, nil
}

// view returns the transaction's part on a server, beginning it if needed.
func (t *shardTx) view(server string, snap *router.Snapshot) (*txView, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.viewLocked(server, snap)
}

func (t *shardTx) viewLocked(server string, snap *router.Snapshot) (*txView, error) {
	if t.done {
		return nil, sql.ErrTxDone
	}
	for _, v := range t.txs {
		if v.server == server {
			return v, nil
		}
	}
	if t.def != nil && !t.spans() {
		return nil, &ShardError{Shard: -1, Server: server, Err: ErrMixedTransaction}
	}
	db, err := t.p.pools.get(snap, server)
	if err != nil {
		return nil, err
	}
	if db.downFor(t.p.cfg.ServerRetry) {
		return nil, &ServerError{Server: server, Err: errKnownDown}
	}
	tx, err := db.BeginTx(t.ctx, t.opts)
	db.report(err, t.p.cfg.ServerRetry)
	if unavailable(err) {
		return nil, &ServerError{Server: server, Err: fmt.Errorf("begin: %w", err)}
	}
	if err != nil {
		return nil, &ShardError{Shard: -1, Server: server, Err: fmt.Errorf("begin: %w", err)}
	}
	if err := t.replaySavepoints(tx.ExecContext); err != nil {
		_ = tx.Rollback()
		return nil, &ShardError{Shard: -1, Server: server, Err: err}
	}
	v := &txView{Tx: tx, t: t, server: server}
	t.txs = append(t.txs, v)
	return v, nil
}

// pinned returns the pinned shard and server, or -1.
func (t *shardTx) pinned() (int, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shard, t.server
}

// takeFenceWait returns the time the transaction waited on a fence
// before it began, once.
func (t *shardTx) takeFenceWait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.fenceWait
	t.fenceWait = 0
	return d
}

// openOn reports whether a user's transaction (not GORM's own around one
// statement) has begun its part on server.
func (t *shardTx) openOn(server string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.statement {
		return false
	}
	for _, v := range t.txs {
		if v.server == server {
			return true
		}
	}
	return false
}

// drop rolls back and forgets the part on one server (a statement-scoped
// retry after the server refused a write for a moved shard).
func (t *shardTx) drop(server string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, v := range t.txs {
		if v.server == server {
			_ = v.Tx.Rollback()
			t.txs = append(t.txs[:i], t.txs[i+1:]...)
			return
		}
	}
}

func (t *shardTx) defTx() (gorm.ConnPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, sql.ErrTxDone
	}
	if t.def != nil {
		return t.def, nil
	}
	if len(t.txs) > 0 && !t.spans() {
		return nil, &ShardError{Shard: t.shard, Server: t.server, Err: ErrMixedTransaction}
	}
	var err error
	switch b := t.base.(type) {
	case gorm.TxBeginner:
		t.def, err = b.BeginTx(t.ctx, t.opts)
	case gorm.ConnPoolBeginner:
		t.def, err = b.BeginTx(t.ctx, t.opts)
	default:
		err = gorm.ErrInvalidTransaction
	}
	if err == nil {
		if err = t.replaySavepoints(t.def.ExecContext); err != nil {
			if c, ok := t.def.(gorm.TxCommitter); ok {
				_ = c.Rollback()
			}
		}
	}
	if err != nil {
		t.def = nil
	}
	return t.def, err
}

// PrepareContext is part of gorm.ConnPool; unsharded statements in the
// transaction run on the default connection.
func (t *shardTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	d, err := t.defTx()
	if err != nil {
		return nil, err
	}
	return d.PrepareContext(ctx, query)
}

// ExecContext is part of gorm.ConnPool (see PrepareContext). Savepoint
// statements (nested transactions) go to every part of the transaction.
func (t *shardTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if verb, name, ok := savepointSQL(query); ok && len(args) == 0 {
		return t.savepoint(ctx, query, verb, name)
	}
	d, err := t.defTx()
	if err != nil {
		return nil, err
	}
	return d.ExecContext(ctx, query, args...)
}

// QueryContext is part of gorm.ConnPool (see PrepareContext).
func (t *shardTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	d, err := t.defTx()
	if err != nil {
		return nil, err
	}
	return d.QueryContext(ctx, query, args...)
}

// StmtContext is part of gorm.Tx (GORM's PrepareStmt mode wraps the
// transaction): it binds a statement prepared on the default connection
// to the transaction's part there.
func (t *shardTx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	d, err := t.defTx()
	if err != nil {
		return stmt
	}
	if s, ok := d.(interface {
		StmtContext(context.Context, *sql.Stmt) *sql.Stmt
	}); ok {
		return s.StmtContext(ctx, stmt)
	}
	return stmt
}

// QueryRowContext is part of gorm.ConnPool (see PrepareContext). A failure
// to begin surfaces when the row is scanned.
func (t *shardTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	d, err := t.defTx()
	if err != nil {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return t.base.QueryRowContext(ctx, query, args...) // a row carrying ctx.Err(), nothing sent
	}
	return d.QueryRowContext(ctx, query, args...)
}

// Commit is part of gorm.TxCommitter. An atomic transaction with more
// than one participant commits by two-phase commit (see commitAtomic).
// Otherwise it commits each server's part, then the default connection's:
// only GORM's own per-statement transaction of a multi-shard write has
// parts on several servers, and those commits are not atomic together (a
// user transaction may not mix a shard and the default connection, see
// ErrMixedTransaction).
func (t *shardTx) Commit() error {
	if t.ranAlone() {
		return nil
	}
	if t.empty() {
		// A transaction that ran nothing commits as in plain GORM: begun
		// and committed on the default connection, so that a closed pool
		// or an ended context still fails it.
		if _, err := t.defTx(); err != nil {
			t.mu.Lock()
			t.done = true
			t.mu.Unlock()
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	if t.atomic && len(t.txs) > 0 && (len(t.txs) > 1 || t.def != nil) {
		return t.commitAtomic()
	}
	var errs []error
	for i, v := range t.txs {
		if err := v.Tx.Commit(); err != nil {
			errs = append(errs, t.txError(v.server, "commit", err))
			for _, rest := range t.txs[i+1:] {
				_ = rest.Tx.Rollback()
			}
			if c, ok := t.def.(gorm.TxCommitter); ok {
				_ = c.Rollback()
			}
			return errors.Join(errs...)
		}
	}
	if c, ok := t.def.(gorm.TxCommitter); ok {
		if err := c.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// txError is the error of a commit or rollback on server: a
// *ServerError when the server went away (whether a commit cut off
// there was applied is unknown: see Retryable), else a *ShardError. A
// rollback's error is typed too because GORM joins it to the
// statement's error as text, keeping only the rollback's type.
func (t *shardTx) txError(server, what string, err error) error {
	if what == "commit" {
		err = commitCut{err}
	}
	if unavailable(err) {
		se := &ServerError{Server: server, Err: fmt.Errorf("%s: %w", what, err)}
		if t.shard >= 0 {
			se.Shards = []int{t.shard}
		}
		return se
	}
	return &ShardError{Shard: t.shard, Server: server, Err: fmt.Errorf("%s: %w", what, err)}
}

// commitCut is the driver's error of a COMMIT, which never says the
// commit is safe to send again (pgconn.SafeToRetry): pgx reports "conn
// closed", safe to retry, for a COMMIT whose connection a FATAL message
// closed while its answer was awaited, and that commit may have been
// applied (a backend ended while it waited for a synchronous standby has
// committed locally).
type commitCut struct{ err error }

func (e commitCut) Error() string     { return e.err.Error() }
func (e commitCut) Unwrap() error     { return e.err }
func (e commitCut) SafeToRetry() bool { return false }

// runAlone marks GORM's transaction around one statement as one whose
// write runs without it.
func (t *shardTx) runAlone() {
	t.mu.Lock()
	t.alone = true
	t.mu.Unlock()
}

// ranAlone ends a transaction whose write ran without it, and that began
// nowhere since: it reports false, and ends nothing, once a statement
// began it on a connection.
func (t *shardTx) ranAlone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.alone || t.done || len(t.txs) > 0 || t.def != nil {
		return false
	}
	t.done = true
	return true
}

// empty reports whether the transaction has begun on no connection yet.
func (t *shardTx) empty() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.done && len(t.txs) == 0 && t.def == nil
}

// Rollback is part of gorm.TxCommitter.
func (t *shardTx) Rollback() error {
	if t.ranAlone() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	var errs []error
	for _, v := range t.txs {
		if err := v.Tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			errs = append(errs, t.txError(v.server, "rollback", err))
		}
	}
	if c, ok := t.def.(gorm.TxCommitter); ok {
		if err := c.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
