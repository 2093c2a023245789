package readexec

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

// Querier is what a statement runs on: a server's pool, a replica's, or a
// transaction's part there (the GORM connection pool the statement was
// rendered with, held by this narrower type so that this stage needs no
// GORM import).
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Stmt is one statement of a read of several shards, rendered before any
// statement runs.
type Stmt struct {
	Unit   int     // the plan's unit it belongs to
	Shards []int   // the logical shards it reads
	Server string  // the physical server it runs on
	Conn   Querier // the server's pool, a replica's, or the transaction's part there
	// DB is the pool Conn runs on when it is a server's or a replica's
	// pool (nil: a transaction's part, or another pool): what a named
	// statement runs on as a pipeline, on a connection of its own.
	DB     *sql.DB
	Schema string // a read that joins other tables runs with this schema on its search_path ("": none)
	Named  bool   // run as a named prepared statement
	Filter Filter // named: drop the rows that cannot enter the page as they arrive (nil: keep all)
	SQL    string
	Vars   []any
	Err    error // binding failed (the server is known down, say): it fails without running
}

// Filter drops, as they arrive, the rows that cannot enter a read's page.
type Filter interface {
	// Cut returns the cut of a statement of unit u whose rows come with
	// cols and are converted by conv; nil to keep every row.
	Cut(cols []memrows.Column, conv []ValueFunc, u int) Cut
}

// Cut is a Filter applied to one statement's rows.
type Cut interface {
	// Drop reports whether a row, given as its wire values, is dropped.
	Drop(raw [][]byte) bool
	// Done is called once the statement's rows are read.
	Done()
}

// Answer is a statement's outcome, written by the goroutine that ran it
// and read by the caller once the goroutine has sent its index.
type Answer struct {
	Rows Partials
	Err  error
}

// Partials are one unit's partial rows, as the driver returned them.
type Partials struct {
	Cols []memrows.Column // as the driver describes them to database/sql
	Rows [][]any
}

// MemRows serves the rows as a server's: each column as the driver
// described it.
func (pt Partials) MemRows() *memrows.Rows {
	r := &memrows.Rows{Cols: pt.Cols, Data: make([][]driver.Value, len(pt.Rows))}
	for i, row := range pt.Rows {
		vals := make([]driver.Value, len(row))
		for j, v := range row {
			vals[j] = v
		}
		r.Data[i] = vals
	}
	return r
}

// Plans is the plan generation of a server's prepared reads: a schema
// change that alters a prepared read's result starts a new generation,
// whose texts differ, so that every connection prepares them afresh.
type Plans interface {
	Gen() int64                          // the current generation
	Text(query string, gen int64) string // query as sent in generation gen
	Changed(gen int64)                   // gen's plans are stale: start the next, unless started already
}

// Config is what the stage needs of the plugin. Every func is called on
// the goroutine that runs the statement, and must be safe for that.
type Config struct {
	// Limit is the bound on one statement's answer under parent; 0: none.
	Limit func(parent context.Context) time.Duration
	// Conn returns the pgx connection under a database/sql driver
	// connection of a server's pool and its server's plan generation; ok
	// false for a driver connection that is not pgx's.
	Conn func(driverConn any) (pc *pgx.Conn, plans Plans, ok bool)
	// AsPrepared is the argument that, first among a statement's, makes
	// the driver run it as a named prepared statement.
	AsPrepared any
	// PerConn is the most prepared reads a connection keeps.
	PerConn int
	// Running, if set, is called with a statement's index as it starts.
	Running func(k int)
	// SetupErr is the error of statement k whose read-only transaction
	// could not begin or take its search_path (nil: err itself).
	SetupErr func(k int, err error) error
	// Err is the error statement k answers for err (not nil), run under
	// parent and bounded by limit (nil: err itself).
	Err func(parent context.Context, k int, err error, limit time.Duration) error
}

// Exec runs a read's statements: the statements of one server one after
// another, the servers at once.
type Exec struct {
	cfg     *Config
	ctx     context.Context
	stmts   []Stmt
	answers []Answer
	servers []string // in plan order
	byServ  [][]int  // statement indexes of each server, in plan order
	stop    atomic.Bool
	// enough is set by the caller when the merged page needs no more rows
	// (a LIMIT with no ORDER BY): the servers skip their other statements.
	// nil for a read that needs every statement's answer.
	enough *atomic.Bool
}

// New returns the run of stmts under ctx; enough, if not nil, is set by
// the caller once it needs no further answer.
func New(cfg *Config, ctx context.Context, stmts []Stmt, enough *atomic.Bool) *Exec {
	if ctx == nil {
		ctx = context.Background()
	}
	x := &Exec{cfg: cfg, ctx: ctx, stmts: stmts, answers: make([]Answer, len(stmts)), enough: enough}
	at := map[string]int{}
	for k, st := range stmts {
		j, ok := at[st.Server]
		if !ok {
			j = len(x.servers)
			at[st.Server] = j
			x.servers = append(x.servers, st.Server)
			x.byServ = append(x.byServ, nil)
		}
		x.byServ[j] = append(x.byServ[j], k)
	}
	return x
}

// Answer returns statement k's answer; the caller may clear its rows once
// read.
func (x *Exec) Answer(k int) *Answer { return &x.answers[k] }

// Run runs the statements and calls take, on the caller's goroutine, with
// the index of each statement as its answer arrives (in plan order within
// a server). take returns false to stop the read: the servers start no
// further statement. A server stops at its first failed statement. With
// serial set, the statements run on the caller's goroutine, server after
// server (a read in a transaction, or of one server).
func (x *Exec) Run(serial bool, take func(k int) bool) {
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
				x.answers[k].Rows, x.answers[k].Err = x.runStmt(x.ctx, k)
				if !take(k) {
					x.stop.Store(true)
				}
				if x.answers[k].Err != nil {
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
				a.Rows, a.Err = x.runStmt(ctx, k)
				done <- k
				if a.Err != nil {
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
// (ReadPipelined), nil where they run one by one: each must be a named
// read of the same pool, and the read must need every answer (a
// pipeline's statements are all sent before the first answer).
func (x *Exec) pipe(ks []int) *sql.DB {
	if x.enough != nil {
		return nil
	}
	var db *sql.DB
	for _, k := range ks {
		st := &x.stmts[k]
		if !st.Named || st.DB == nil {
			return nil
		}
		if db != nil && st.DB != db {
			return nil
		}
		db = st.DB
	}
	return db
}

// runPipelined runs a server's statements ks on one connection of db as
// pipelines, sets each answer and calls got with its index as it arrives
// (got returns false to stop). It stops at the first failed statement;
// one whose binding failed fails there, without running.
func (x *Exec) runPipelined(ctx context.Context, db *sql.DB, ks []int, got func(k int) bool) {
	n := len(ks)
	ps := make([]PipeStmt, 0, n)
	for i, k := range ks {
		st := &x.stmts[k]
		if st.Err != nil {
			n = i
			break
		}
		if x.cfg.Running != nil {
			x.cfg.Running(k)
		}
		ps = append(ps, PipeStmt{SQL: st.SQL, Vars: st.Vars, Filter: st.Filter, Unit: st.Unit})
	}
	limit := x.limit(ctx)
	goOn := true
	ReadPipelined(x.cfg, ctx, db, ps, limit, func(i int, pt Partials, err error) bool {
		k := ks[i]
		x.answers[k].Rows, x.answers[k].Err = pt, x.err(ctx, k, err, limit)
		goOn = got(k) && err == nil
		return goOn
	})
	if goOn && n < len(ks) {
		k := ks[n]
		x.answers[k].Err = x.stmts[k].Err
		got(k)
	}
}

// Following returns the units of statement k's server from k's unit on,
// in plan order: what a server that failed at k did not read.
func (x *Exec) Following(k int) []int {
	var units []int
	for _, ks := range x.byServ {
		i := slices.Index(ks, k)
		if i < 0 {
			continue
		}
		for _, j := range ks[i:] {
			if u := x.stmts[j].Unit; len(units) == 0 || units[len(units)-1] != u {
				units = append(units, u)
			}
		}
	}
	return units
}

func (x *Exec) limit(parent context.Context) time.Duration {
	if x.cfg.Limit == nil {
		return 0
	}
	return x.cfg.Limit(parent)
}

func (x *Exec) err(parent context.Context, k int, err error, limit time.Duration) error {
	if err == nil || x.cfg.Err == nil {
		return err
	}
	return x.cfg.Err(parent, k, err, limit)
}

// runStmt runs statement k and reads its rows. It runs off the caller's
// goroutine: it touches database/sql alone. Its context is bounded by
// the Config's Limit unless the caller's ends sooner; a statement that
// bound stopped answers an error wrapping ErrBoundPassed.
func (x *Exec) runStmt(parent context.Context, k int) (Partials, error) {
	st := &x.stmts[k]
	if st.Err != nil {
		return Partials{}, st.Err
	}
	if x.cfg.Running != nil {
		x.cfg.Running(k)
	}
	ctx, limit := parent, x.limit(parent)
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, limit)
		defer cancel()
	}
	rows, err := x.query(ctx, k, st)
	if err != nil && st.Named && PlanChanged(err) {
		// The connection's prepared statement is stale: this run goes
		// unnamed, the next prepares again.
		unnamed := *st
		unnamed.Named = false
		rows, err = x.query(ctx, k, &unnamed)
	}
	if err != nil && limit > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		err = fmt.Errorf("%w: %w", ErrBoundPassed, err)
	}
	return rows, x.err(parent, k, err, limit)
}

// query runs the statement's text on its connection, in a read-only
// transaction with the shard's schema on its search_path when it joins
// other tables (they resolve there), and reads every row.
func (x *Exec) query(ctx context.Context, k int, st *Stmt) (Partials, error) {
	if st.Named {
		if st.DB != nil { // a server's pool, or a replica's
			return ReadNamed(x.cfg, ctx, st.DB, st.SQL, st.Vars, st.Filter, st.Unit)
		}
		return ReadAll(ctx, st.Conn, st.SQL, append([]any{x.cfg.AsPrepared}, st.Vars...))
	}
	if st.Schema == "" {
		return ReadAll(ctx, st.Conn, st.SQL, st.Vars)
	}
	pool, ok := st.Conn.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		return ReadAll(ctx, st.Conn, st.SQL, st.Vars)
	}
	setupErr := func(err error) error {
		if x.cfg.SetupErr == nil {
			return err
		}
		return x.cfg.SetupErr(k, err)
	}
	tx, err := pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Partials{}, setupErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, SetSearchPath, pgx.Identifier{st.Schema}.Sanitize()); err != nil {
		return Partials{}, setupErr(err)
	}
	rows, err := ReadAll(ctx, tx, st.SQL, st.Vars)
	if err != nil {
		return rows, err
	}
	return rows, tx.Commit()
}

// SetSearchPath sets a transaction's search_path to its one argument, a
// sanitized schema name.
const SetSearchPath = `SELECT set_config('search_path', $1, true)`

// ReadAll runs a query and keeps its rows as the driver returned them
// (database/sql copies the bytes it hands out).
func ReadAll(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, text string, vars []any) (Partials, error) {
	rows, err := q.QueryContext(ctx, text, vars...)
	if err != nil {
		return Partials{}, err
	}
	return ScanAll(rows)
}

// ScanAll reads every row of rows and closes them.
func ScanAll(rows *sql.Rows) (Partials, error) {
	var pt Partials
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return pt, err
	}
	pt.Cols = ColumnsOf(cts)
	// Each row's values are a slice of a block shared by several rows (1,
	// 2, 4, … up to 64), scanned into through pointers into the block: a
	// read of thousands of rows allocates per block, not twice per row,
	// and a read of one row no more than before.
	n := len(pt.Cols)
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
		pt.Rows = append(pt.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return pt, err
	}
	return pt, rows.Close()
}

// ColumnsOf is what the stage keeps of database/sql's description of
// columns: what memrows serves them with again.
func ColumnsOf(cts []*sql.ColumnType) []memrows.Column {
	cols := make([]memrows.Column, len(cts))
	for i, ct := range cts {
		cols[i] = memrows.Column{Name: ct.Name(), DBType: ct.DatabaseTypeName(), Scan: ct.ScanType()}
	}
	return cols
}

// PlanChanged reports Postgres's refusal to run a prepared statement
// whose result columns a schema change altered (a column added to a
// table a SELECT * reads, a column's type or collation changed). The
// message is translated by the server's lc_messages, so the refusal is
// known by its SQLSTATE (0A000, feature_not_supported) and the function
// of Postgres that raises it, which every server names in its error
// whatever its language; the English text stays for a server or proxy
// that leaves the routine out.
func PlanChanged(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" {
		return false
	}
	return pe.Routine == "RevalidateCachedQuery" || strings.Contains(pe.Message, "cached plan must not change result type")
}
