package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/plugin/internal/readexec"
)

// The execute stage of a read of several shards runs in
// plugin/internal/readexec, a package that does not import GORM: its
// goroutines, one per server, take statements whose text and arguments
// were rendered on the caller's goroutine (read_render.go), run them on
// connections of their own, and read the rows into values they own.
// GORM's builders mutate what they build from (clause.Where.Build
// reorders a leading Or in place), so a statement shared by goroutines is
// a wrong answer waiting to happen; the compiler keeps the stage away
// from it. This file hands the stage the rendered statements and what it
// needs of the plugin (the statement bound, the servers' pgx connections
// and plan generations), and turns its plain errors into the plugin's
// typed ones. Every answer goes back to the caller's goroutine, which
// scans and merges it (read.go).

// querier is what a statement runs on: a server's pool, a replica's, or a
// transaction's part there.
type querier = readexec.Querier

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

// execStmt is st as the execute stage takes it.
func (st *readStmt) execStmt() readexec.Stmt {
	x := readexec.Stmt{Unit: st.unit, Shards: st.shards, Server: st.server, Conn: st.conn, Schema: st.schema,
		Named: st.named, SQL: st.sql, Vars: st.vars, Err: st.err}
	switch c := st.conn.(type) {
	case *serverDB: // a server's pool
		x.DB = c.DB
	case *sql.DB: // a replica's
		x.DB = c
	}
	if st.filter != nil {
		x.Filter = st.filter
	}
	return x
}

// partials are one unit's partial rows, as the driver returned them.
type partials struct {
	cols []memrows.Column // as the driver describes them to database/sql
	rows [][]any
}

func fromExec(pt readexec.Partials) partials { return partials{cols: pt.Cols, rows: pt.Rows} }

// memRows serves the rows as a server's: each column as the driver
// described it.
func (pt partials) memRows() *memrows.Rows {
	return readexec.Partials{Cols: pt.cols, Rows: pt.rows}.MemRows()
}

// readExec runs a read's statements (readexec.Exec) for the plugin.
type readExec struct {
	stmts []readStmt
	x     *readexec.Exec
	cfg   readexec.Config
}

// stmtAnswer is statement k's outcome, once its index was taken.
type stmtAnswer struct {
	rows partials
	err  error
}

func newReadExec(p *Plugin, ctx context.Context, table string, stmts []readStmt, enough *atomic.Bool) *readExec {
	r := &readExec{stmts: stmts}
	r.cfg = p.execConfig()
	r.cfg.Running = func(k int) {
		if p.running != nil { // read as the statement starts, as tests set it
			p.running(&stmts[k])
		}
	}
	r.cfg.SetupErr = func(k int, err error) error {
		shard := -1
		if st := &stmts[k]; len(st.shards) == 1 {
			shard = st.shards[0]
		}
		return &ShardError{Shard: shard, Table: table, Err: err}
	}
	r.cfg.Err = func(parent context.Context, k int, err error, limit time.Duration) error {
		return stmtErr(parent, &stmts[k], table, err, limit)
	}
	xs := make([]readexec.Stmt, len(stmts))
	for k := range stmts {
		xs[k] = stmts[k].execStmt()
	}
	r.x = readexec.New(&r.cfg, ctx, xs, enough)
	return r
}

// run runs the statements (readexec.Exec.Run).
func (r *readExec) run(serial bool, take func(k int) bool) { r.x.Run(serial, take) }

// answer returns statement k's answer and clears the stage's copy: its
// rows are the caller's now.
func (r *readExec) answer(k int) stmtAnswer {
	a := r.x.Answer(k)
	out := stmtAnswer{rows: fromExec(a.Rows), err: a.Err}
	a.Rows = readexec.Partials{}
	return out
}

// following returns the units of statement k's server from k's unit on
// (readexec.Exec.Following).
func (r *readExec) following(k int) []int { return r.x.Following(k) }

// execConfig is what the execute stage needs of the plugin, errors aside.
func (p *Plugin) execConfig() readexec.Config {
	return readexec.Config{
		Limit:      p.stmtLimit,
		Conn:       pgxOf,
		AsPrepared: asPrepared,
		PerConn:    preparedReadsPerConn,
	}
}

// pgxOf returns the pgx connection under a driver connection of a
// server's pool, with the server's plan generation (one of its own for
// a connection that has none).
func pgxOf(dc any) (*pgx.Conn, readexec.Plans, bool) {
	switch c := dc.(type) {
	case unnamedConn:
		if c.plans != nil {
			return c.Conn(), c.plans, true
		}
		return c.Conn(), new(planGeneration), true
	case interface{ Conn() *pgx.Conn }:
		return c.Conn(), new(planGeneration), true
	}
	return nil, nil, false
}

// Gen is part of readexec.Plans.
func (g *planGeneration) Gen() int64 { return g.n.Load() }

// Text is part of readexec.Plans.
func (g *planGeneration) Text(query string, gen int64) string { return g.text(query, gen) }

// Changed is part of readexec.Plans.
func (g *planGeneration) Changed(gen int64) { g.n.CompareAndSwap(gen, gen+1) }

var _ readexec.Plans = (*planGeneration)(nil)

// errBoundPassed ends a statement whose server gave no answer within the
// statement bound (readexec.ErrBoundPassed).
var errBoundPassed = readexec.ErrBoundPassed

// stmtErr is the error a statement of a read answers for err: a
// *ServerError for one its bound stopped (errBoundPassed, the caller's
// own context still live), as a one-shard statement gets (bounded);
// ErrServerLockSpace for a server out of lock space.
func stmtErr(parent context.Context, st *readStmt, table string, err error, limit time.Duration) error {
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

// readAll runs a query and keeps its rows as the driver returned them
// (readexec.ReadAll).
func readAll(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, text string, vars []any) (partials, error) {
	pt, err := readexec.ReadAll(ctx, q, text, vars)
	return fromExec(pt), err
}

// scanAll reads every row of rows and closes them (readexec.ScanAll).
func scanAll(rows *sql.Rows) (partials, error) {
	pt, err := readexec.ScanAll(rows)
	return fromExec(pt), err
}

// planChanged reports Postgres's refusal to run a prepared statement
// whose result columns a schema change altered (readexec.PlanChanged).
func planChanged(err error) bool { return readexec.PlanChanged(err) }

// valueFunc converts a column's wire value (never NULL) into the value
// pgx's database/sql driver gives for it.
type valueFunc = readexec.ValueFunc

// Cut is part of readexec.Filter: f's cut of a statement of unit u, nil
// where it keeps every row.
func (f *pageFilter) Cut(cols []memrows.Column, conv []valueFunc, u int) readexec.Cut {
	if c := f.cut(cols, conv, u); c != nil {
		return c
	}
	return nil
}

// Drop is part of readexec.Cut.
func (c *pageCut) Drop(raw [][]byte) bool { return c.drop(raw) }

// Done is part of readexec.Cut.
func (c *pageCut) Done() { c.done() }

var _ readexec.Filter = (*pageFilter)(nil)
