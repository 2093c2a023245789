package plugin

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ServerError reports a statement that could not reach a physical server:
// the connection failed, was cut, or the server is shutting down. It
// matches ErrServerUnavailable (errors.Is) and unwraps to the driver's
// error. While a server is known down the plugin fails its statements at
// once with this error (no connection attempt) and lets one statement
// through every Config.ServerRetry to find out whether it is back.
type ServerError struct {
	Server string // the physical server
	Shards []int  // the logical shards the statement could not reach
	Table  string // table of the statement, "" when unknown
	Err    error  // the driver's error
}

func (e *ServerError) Error() string {
	where := "shards " + shardList(e.Shards)
	if e.Table != "" {
		where = "table " + e.Table + ", " + where
	}
	return fmt.Sprintf("shardkit: server %s unavailable (%s): %v; retry later, or read the other servers' shards with plugin.Partial",
		e.Server, where, e.Err)
}

// Unwrap returns ErrServerUnavailable and the driver's error.
func (e *ServerError) Unwrap() []error { return []error{ErrServerUnavailable, e.Err} }

// shardList prints at most ten shard numbers.
func shardList(s []int) string {
	if len(s) > 10 {
		return fmt.Sprintf("%v… (%d)", s[:10], len(s))
	}
	return fmt.Sprint(s)
}

// errKnownDown is the cause of a ServerError for a statement failed at
// once because its server is taken as down.
var errKnownDown = errors.New("the server failed recently and is taken as down until its retry")

// knownDown reports whether err is the fast failure of a server taken as
// down (which says nothing new about the server).
func knownDown(err error) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Err == errKnownDown
}

// unavailable reports whether an error says the server could not be
// reached or went away, as opposed to an error of the statement itself.
func unavailable(err error) bool {
	if err == nil || errors.Is(err, ErrServerUnavailable) {
		return err != nil
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		// Class 08: connection exception; 57P01-57P03: the server is
		// shutting down, crashed, or not accepting connections yet.
		return len(pe.Code) == 5 && (pe.Code[:2] == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03")
	case errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	}
	return pgconn.Timeout(err) && !errors.Is(err, context.Canceled)
}

// downFor reports whether a server is known down and this statement
// should fail at once. When the retry interval has passed, one caller
// wins the right to try the server (false) and the others keep failing
// fast until that try reports.
func (s *serverDB) downFor(retry time.Duration) bool {
	until := s.downUntil.Load()
	if until == 0 {
		return false
	}
	now := time.Now().UnixNano()
	if now < until {
		return true
	}
	return !s.downUntil.CompareAndSwap(until, now+int64(retry))
}

// report records the outcome of a statement on the server: a failure
// that says the server is unreachable marks it down for retry; any other
// outcome marks it up. A statement failed at once because the server is
// known down never reached it, and changes nothing.
func (s *serverDB) report(err error, retry time.Duration) {
	if retry <= 0 {
		return
	}
	if !unavailable(err) {
		if s.downUntil.Load() != 0 {
			s.downUntil.Store(0)
		}
	} else if !knownDown(err) {
		s.downUntil.Store(time.Now().UnixNano() + int64(retry))
	}
}

// outcome runs after each chain's executor: a statement that could not
// reach its server gets a *ServerError naming the server and shard, and
// the server's health is recorded. Multi-shard reads report per server
// from the fan-out.
func (p *Plugin) outcome(db *gorm.DB) {
	stmt := db.Statement
	var srv *serverDB
	server := ""
	switch c := stmt.ConnPool.(type) {
	case *serverDB:
		srv, server = c, c.name
	case *txView:
		server = c.server
	case *shardTx:
		server = c.server
	}
	if srv != nil {
		srv.report(db.Error, p.cfg.ServerRetry)
	}
	if !unavailable(db.Error) {
		return
	}
	var se *ServerError
	if errors.As(db.Error, &se) {
		return
	}
	m, shard, _ := p.lookup(stmt)
	if server == "" && shard >= 0 {
		if pl, err := p.router.Snapshot().Placement(shard); err == nil {
			server = pl.Server
		}
	}
	e := &ServerError{Server: server, Err: db.Error}
	if shard >= 0 {
		e.Shards = []int{shard}
	}
	if m != nil {
		e.Table = m.table
	}
	if srv == nil && server != "" {
		if s, err := p.pools.get(p.router.Snapshot(), server); err == nil {
			s.report(db.Error, p.cfg.ServerRetry)
		}
	}
	db.Error = e
}

// deadlineGrace is how much longer than Config.StatementTimeout the plugin
// waits for a server's answer: the server's own statement_timeout (the same
// value) ends a slow statement first, with its own error; only a server
// that does not answer at all reaches the plugin's deadline.
const deadlineGrace = time.Second

// bounded runs a statement's executor with its context bounded by
// StatementTimeout (plus deadlineGrace), unless the caller's context ends
// sooner. A statement the deadline stopped gets a *ServerError: its server
// did not answer, and is taken as down for ServerRetry.
func (p *Plugin) bounded(db *gorm.DB, exec func(*gorm.DB)) {
	t := p.cfg.StatementTimeout
	stmt := db.Statement
	parent := stmt.Context
	if t <= 0 || db.DryRun || parent == nil {
		exec(db)
		return
	}
	t += deadlineGrace
	if dl, ok := parent.Deadline(); ok && time.Until(dl) <= t {
		exec(db)
		return
	}
	ctx, cancel := context.WithTimeout(parent, t)
	stmt.Context = ctx
	exec(db)
	cancel()
	stmt.Context = parent
	if db.Error != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		var se *ServerError
		if !errors.As(db.Error, &se) {
			e := &ServerError{Server: serverOf(stmt.ConnPool), Err: fmt.Errorf("no answer within %v: %w", t, db.Error)}
			if m, shard, _ := p.lookup(stmt); m != nil {
				e.Table = m.table
				if shard >= 0 {
					e.Shards = []int{shard}
				}
			}
			db.Error = e
		}
	}
}

// PartialResult is filled by a multi-shard read scoped with Partial: the
// shards it could not read because their server was unavailable, and the
// servers' errors. Empty when every shard answered.
type PartialResult struct {
	Missing []int          // logical shards not read, ascending
	Errors  []*ServerError // one per unavailable server
}

// Complete reports whether every shard was read.
func (r *PartialResult) Complete() bool { return len(r.Missing) == 0 }

func (r *PartialResult) add(e *ServerError) {
	r.Errors = append(r.Errors, e)
	r.Missing = append(r.Missing, e.Shards...)
	slices.Sort(r.Missing)
}

// partialName is the statement clause holding a Partial scope.
const partialName = "shardkit:partial"

type partial struct{ r *PartialResult }

// Partial lets a multi-shard read return the rows of the servers that
// answered when others are unavailable, instead of failing: the shards
// not read, and why, are written to r (reset first), and the statement's
// error is nil. Other errors still fail the read. Use it where part of
// an answer is better than none (a feed, an overview); check r.Complete.
//
//	var pr plugin.PartialResult
//	err := db.Clauses(plugin.AllShards(), plugin.Partial(&pr)).Find(&photos).Error
func Partial(r *PartialResult) clause.Expression { return partial{r: r} }

// ModifyStatement records the scope on the statement.
func (s partial) ModifyStatement(stmt *gorm.Statement) {
	*s.r = PartialResult{}
	stmt.Clauses[partialName] = clause.Clause{Expression: s}
}

// Build is part of clause.Expression; Partial adds no SQL.
func (partial) Build(clause.Builder) {}

func partialOf(stmt *gorm.Statement) *PartialResult {
	if c, ok := stmt.Clauses[partialName]; ok {
		if s, ok := c.Expression.(partial); ok {
			return s.r
		}
	}
	return nil
}
