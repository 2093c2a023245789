package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/memrows"
)

// The execute stage of a read of several shards. Its goroutines, one per
// server, take statements whose text and arguments were rendered on the
// caller's goroutine (read_render.go), run them on connections of their own,
// and read the rows into values they own. They never read or write GORM
// state: no *gorm.DB, no *gorm.Statement, no clause. GORM's builders
// mutate what they build from (clause.Where.Build reorders a leading Or in
// place), so a statement shared by goroutines is a wrong answer waiting
// to happen. Every answer goes back to the caller's goroutine, which
// scans and merges it (read.go).

// querier is what a statement runs on: a server's pool, a replica's, or a
// transaction's part there (the GORM connection pool the statement was
// rendered with, held by this narrower type so that this stage needs no
// GORM import).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readStmt is one statement of a read of several shards, rendered before
// any statement runs.
type readStmt struct {
	unit   int         // the plan's unit it belongs to
	shards []int       // the logical shards it reads
	server string      // the physical server it runs on
	conn   querier     // the server's pool, a replica's, or the transaction's part there
	schema string      // a read that joins other tables runs with this schema on its search_path ("": none)
	named  bool        // run as a named prepared statement (PreparedReads)
	filter *pageFilter // named: drop the rows that cannot enter the page as they arrive (nil: keep all)
	sql    string
	vars   []any
	err    error // binding failed (the server is known down, say): it fails without running
}

// stmtAnswer is a statement's outcome, written by the goroutine that ran
// it and read by the caller once the goroutine has sent its index.
type stmtAnswer struct {
	rows partials
	err  error
}

// partials are one unit's partial rows, as the driver returned them.
type partials struct {
	cols []memrows.Column // as the driver describes them to database/sql
	rows [][]any
}

// memRows serves the rows as a server's: each column as the driver
// described it.
func (pt partials) memRows() *memrows.Rows {
	r := &memrows.Rows{Cols: pt.cols, Data: make([][]driver.Value, len(pt.rows))}
	for i, row := range pt.rows {
		vals := make([]driver.Value, len(row))
		for j, v := range row {
			vals[j] = v
		}
		r.Data[i] = vals
	}
	return r
}

// readExec runs a read's statements: the statements of one server one
// after another, the servers at once.
type readExec struct {
	p       *Plugin
	ctx     context.Context
	table   string
	stmts   []readStmt
	answers []stmtAnswer
	servers []string // in plan order
	byServ  [][]int  // statement indexes of each server, in plan order
	stop    atomic.Bool
	// enough is set by the caller when the merged page needs no more rows
	// (a LIMIT with no ORDER BY): the servers skip their other statements.
	// nil for a read that needs every statement's answer.
	enough *atomic.Bool
}

func newReadExec(p *Plugin, ctx context.Context, table string, stmts []readStmt, enough *atomic.Bool) *readExec {
	if ctx == nil {
		ctx = context.Background()
	}
	x := &readExec{p: p, ctx: ctx, table: table, stmts: stmts, answers: make([]stmtAnswer, len(stmts)), enough: enough}
	at := map[string]int{}
	for k, st := range stmts {
		j, ok := at[st.server]
		if !ok {
			j = len(x.servers)
			at[st.server] = j
			x.servers = append(x.servers, st.server)
			x.byServ = append(x.byServ, nil)
		}
		x.byServ[j] = append(x.byServ[j], k)
	}
	return x
}

// run runs the statements and calls take, on the caller's goroutine, with
// the index of each statement as its answer arrives (in plan order within
// a server). take returns false to stop the read: the servers start no
// further statement. A server stops at its first failed statement. With
// serial set, the statements run on the caller's goroutine, server after
// server (a read in a transaction, or of one server).
func (x *readExec) run(serial bool, take func(k int) bool) {
	next := func() bool { return !x.stop.Load() && (x.enough == nil || !x.enough.Load()) }
	if serial || len(x.servers) == 1 {
		for _, ks := range x.byServ {
			if db := x.pipe(ks); db != nil {
				if next() {
					x.runPipelined(x.ctx, db, ks, func(k int) bool {
						if !take(k) {
							x.stop.Store(true)
						}
						return next()
					})
				}
				continue
			}
			for _, k := range ks {
				if !next() {
					return
				}
				x.answers[k].rows, x.answers[k].err = x.p.runStmt(x.ctx, &x.stmts[k], x.table)
				if !take(k) {
					x.stop.Store(true)
				}
				if x.answers[k].err != nil {
					break
				}
			}
		}
		return
	}
	ctx, cancel := context.WithCancel(x.ctx)
	defer cancel()
	// Buffered for every message: a goroutine never waits for the caller.
	done := make(chan int, len(x.stmts)+len(x.servers))
	for j, ks := range x.byServ {
		go func() {
			defer func() { done <- -1 - j }()
			if db := x.pipe(ks); db != nil {
				x.runPipelined(ctx, db, ks, func(k int) bool {
					done <- k
					return next()
				})
				return
			}
			for _, k := range ks {
				if !next() {
					return
				}
				a := &x.answers[k]
				a.rows, a.err = x.p.runStmt(ctx, &x.stmts[k], x.table)
				done <- k
				if a.err != nil {
					return
				}
			}
		}()
	}
	for left := len(x.servers); left > 0; {
		k := <-done
		if k < 0 {
			left--
			continue
		}
		if x.stop.Load() {
			continue // the read has failed: what still arrives is not read
		}
		if !take(k) {
			x.stop.Store(true)
			cancel() // the statements still running answer nothing that is read
		}
	}
}

// pipe returns the pool a server's statements ks run on as pipelines
// (readPipelined), nil where they run one by one: each must be a named
// read of the same pool, and the read must need every answer (a
// pipeline's statements are all sent before the first answer).
func (x *readExec) pipe(ks []int) *sql.DB {
	if x.enough != nil {
		return nil
	}
	var db *sql.DB
	for _, k := range ks {
		st := &x.stmts[k]
		if !st.named {
			return nil
		}
		var d *sql.DB
		switch c := st.conn.(type) {
		case *serverDB:
			d = c.DB
		case *sql.DB:
			d = c
		default:
			return nil
		}
		if db != nil && d != db {
			return nil
		}
		db = d
	}
	return db
}

// runPipelined runs a server's statements ks on one connection of db as
// pipelines, sets each answer and calls got with its index as it arrives
// (got returns false to stop). It stops at the first failed statement;
// one whose binding failed fails there, without running.
func (x *readExec) runPipelined(ctx context.Context, db *sql.DB, ks []int, got func(k int) bool) {
	n := len(ks)
	ps := make([]pipeStmt, 0, n)
	for i, k := range ks {
		st := &x.stmts[k]
		if st.err != nil {
			n = i
			break
		}
		if x.p.running != nil {
			x.p.running(st)
		}
		ps = append(ps, pipeStmt{sql: st.sql, vars: st.vars, filter: st.filter, unit: st.unit})
	}
	limit := x.p.stmtLimit(ctx)
	goOn := true
	readPipelined(ctx, db, ps, limit, func(i int, pt partials, err error) bool {
		k := ks[i]
		x.answers[k].rows, x.answers[k].err = pt, x.p.stmtErr(ctx, &x.stmts[k], x.table, err, limit)
		goOn = got(k) && err == nil
		return goOn
	})
	if goOn && n < len(ks) {
		k := ks[n]
		x.answers[k].err = x.stmts[k].err
		got(k)
	}
}

// following returns the units of statement k's server from k's unit on,
// in plan order: what a server that failed at k did not read.
func (x *readExec) following(k int) []int {
	var units []int
	for _, ks := range x.byServ {
		i := slices.Index(ks, k)
		if i < 0 {
			continue
		}
		for _, j := range ks[i:] {
			if u := x.stmts[j].unit; len(units) == 0 || units[len(units)-1] != u {
				units = append(units, u)
			}
		}
	}
	return units
}

// runStmt runs one rendered statement and reads its rows. It runs off the
// caller's goroutine: it touches database/sql alone. Its context is
// bounded by StatementTimeout (plus deadlineGrace) unless the caller's
// ends sooner; a statement that bound stopped gets a *ServerError, as a
// one-shard statement does (bounded).
func (p *Plugin) runStmt(parent context.Context, st *readStmt, table string) (partials, error) {
	if st.err != nil {
		return partials{}, st.err
	}
	if p.running != nil {
		p.running(st)
	}
	ctx, cancel, limit := p.statementBound(parent)
	defer cancel()
	rows, err := st.query(ctx, table)
	if err != nil && st.named && planChanged(err) {
		// The connection's prepared statement is stale: this run goes
		// unnamed, the next prepares again.
		unnamed := *st
		unnamed.named = false
		rows, err = unnamed.query(ctx, table)
	}
	if err != nil && limit > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		err = fmt.Errorf("%w: %w", errBoundPassed, err)
	}
	return rows, p.stmtErr(parent, st, table, err, limit)
}

// stmtErr is the error a statement of a read answers for err: a
// *ServerError for one its bound stopped (errBoundPassed, the caller's
// own context still live), as a one-shard statement gets (bounded);
// ErrServerLockSpace for a server out of lock space.
func (p *Plugin) stmtErr(parent context.Context, st *readStmt, table string, err error, limit time.Duration) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errBoundPassed) && parent.Err() == nil {
		var se *ServerError
		if !errors.As(err, &se) {
			err = &ServerError{Server: st.server, Shards: slices.Clone(st.shards), Table: table, Err: fmt.Errorf("no answer within %v: %w", limit, err)}
		}
	}
	if lockSpace(err) {
		err = fmt.Errorf("shardkit: server %s: a statement reading %d shards of %s: %w: %w", st.server, len(st.shards), table, ErrServerLockSpace, err)
	}
	return err
}

// lockSpace reports whether err is a server's refusal of a lock for want
// of room in its lock table: "out of shared memory" (53200) with the hint
// Postgres gives then. The same code with another hint (predicate locks,
// say) is some other shortage, left as it is.
func lockSpace(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53200" && strings.Contains(pe.Hint, "max_locks_per_transaction")
}

// statementBound returns the context a statement runs under: parent,
// bounded by StatementTimeout plus deadlineGrace unless parent ends
// sooner, and the bound (0: none).
func (p *Plugin) statementBound(parent context.Context) (context.Context, context.CancelFunc, time.Duration) {
	t := p.stmtLimit(parent)
	if t == 0 {
		return parent, func() {}, 0
	}
	ctx, cancel := context.WithTimeout(parent, t)
	return ctx, cancel, t
}

// stmtLimit is the bound statementBound puts on a statement under
// parent: StatementTimeout plus deadlineGrace, 0 if none or if parent
// ends sooner.
func (p *Plugin) stmtLimit(parent context.Context) time.Duration {
	t := p.cfg.StatementTimeout
	if t <= 0 {
		return 0
	}
	t += deadlineGrace
	if dl, ok := parent.Deadline(); ok && time.Until(dl) <= t {
		return 0
	}
	return t
}

// query runs the statement's text on its connection, in a read-only
// transaction with the shard's schema on its search_path when it joins
// other tables (they resolve there), and reads every row.
func (st *readStmt) query(ctx context.Context, table string) (partials, error) {
	if st.named {
		switch db := st.conn.(type) {
		case *serverDB: // a server's pool
			return readNamed(ctx, db.DB, st.sql, st.vars, st.filter, st.unit)
		case *sql.DB: // a replica's
			return readNamed(ctx, db, st.sql, st.vars, st.filter, st.unit)
		}
		return readAll(ctx, st.conn, st.sql, append([]any{asPrepared}, st.vars...))
	}
	if st.schema == "" {
		return readAll(ctx, st.conn, st.sql, st.vars)
	}
	pool, ok := st.conn.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		return readAll(ctx, st.conn, st.sql, st.vars)
	}
	shard := -1
	if len(st.shards) == 1 {
		shard = st.shards[0]
	}
	tx, err := pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return partials{}, &ShardError{Shard: shard, Table: table, Err: err}
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, setSearchPath, pgx.Identifier{st.schema}.Sanitize()); err != nil {
		return partials{}, &ShardError{Shard: shard, Table: table, Err: err}
	}
	rows, err := readAll(ctx, tx, st.sql, st.vars)
	if err != nil {
		return rows, err
	}
	return rows, tx.Commit()
}

// readAll runs a query and keeps its rows as the driver returned them
// (database/sql copies the bytes it hands out).
func readAll(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, text string, vars []any) (partials, error) {
	rows, err := q.QueryContext(ctx, text, vars...)
	if err != nil {
		return partials{}, err
	}
	return scanAll(rows)
}

// scanAll reads every row of rows and closes them.
func scanAll(rows *sql.Rows) (partials, error) {
	var pt partials
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return pt, err
	}
	pt.cols = columnsOf(cts)
	// Each row's values are a slice of a block shared by several rows (1,
	// 2, 4, … up to 64), scanned into through pointers into the block: a
	// read of thousands of rows allocates per block, not twice per row,
	// and a read of one row no more than before.
	n := len(pt.cols)
	ptrs := make([]any, n)
	var block []any
	per := 1
	for rows.Next() {
		if len(block) < n {
			block = make([]any, n*per)
			per = min(2*per, 64)
		}
		vals := block[:n:n]
		block = block[n:]
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return pt, err
		}
		pt.rows = append(pt.rows, vals)
	}
	if err := rows.Err(); err != nil {
		return pt, err
	}
	return pt, rows.Close()
}

// columnsOf is what the plugin keeps of database/sql's description of
// columns: what memrows serves them with again.
func columnsOf(cts []*sql.ColumnType) []memrows.Column {
	cols := make([]memrows.Column, len(cts))
	for i, ct := range cts {
		cols[i] = memrows.Column{Name: ct.Name(), DBType: ct.DatabaseTypeName(), Scan: ct.ScanType()}
	}
	return cols
}

// planChanged reports Postgres's refusal to run a prepared statement
// whose result columns a schema change altered (a column added to a
// table a SELECT * reads, a column's type or collation changed). The
// message is translated by the server's lc_messages, so the refusal is
// known by its SQLSTATE (0A000, feature_not_supported) and the function
// of Postgres that raises it, which every server names in its error
// whatever its language; the English text stays for a server or proxy
// that leaves the routine out.
func planChanged(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" {
		return false
	}
	return pe.Routine == "RevalidateCachedQuery" || strings.Contains(pe.Message, "cached plan must not change result type")
}
