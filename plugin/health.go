package plugin

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
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

// ErrServerBusy reports a statement whose caller's context ended while a
// connection to its server was being opened: the server was reached but
// had not started the session yet (overloaded: a fleet starting at once,
// a burst of new connections), or the process's attempts to connect to it
// were all under way (Config.MaxConnecting). It arrives as a *BusyError,
// which also matches the context's error (context.DeadlineExceeded). The
// server is not taken as down: retry with a backoff, or give the caller
// more time.
var ErrServerBusy = errors.New("server busy: no connection before the caller's deadline")

// BusyError is ErrServerBusy with the server and how long the caller
// waited for a connection to it.
type BusyError struct {
	Server string        // the physical server
	Waited time.Duration // from the connection request to the caller's deadline
	Err    error         // the context's error and the driver's
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("shardkit: server %s busy: no connection within the caller's deadline (waited %v): %v; the server is up but slow to accept sessions: retry with a backoff or a longer deadline",
		e.Server, e.Waited.Round(time.Millisecond), e.Err)
}

// Unwrap returns ErrServerBusy and the context's and driver's error.
func (e *BusyError) Unwrap() []error { return []error{ErrServerBusy, e.Err} }

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
// reached or went away, as opposed to an error of the statement itself,
// a refusal for a configuration reason (configRefusal), or the end of the
// caller's own context. The plugin's own deadline (bounded) and connect
// timeout arrive as a *ServerError and a connectTimeoutError: a caller
// who gave up, whether waiting for a pooled connection, a new one (a
// *BusyError: the server accepted it and was slow to start the session)
// or an answer, says nothing about the server.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrServerUnavailable) {
		return true
	}
	if errors.Is(err, ErrServerBusy) || configRefusal(err) {
		return false
	}
	var ct *connectTimeoutError
	if errors.As(err, &ct) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || pgconn.Timeout(err) {
		return false
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
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, pgconn.ErrConnClosed): // the driver closed the connection under a statement: the server ended it or the network cut it
		return true
	}
	return false
}

// configRefusal reports whether an error is a server's or pooler's
// refusal of a connection for a configuration reason: authentication
// (class 28), an unknown database (3D000), no privilege to connect
// (42501), a startup parameter the server does not know or whose value
// it rejects (42704, 22023), or PgBouncer's refusals of these, which it
// sends as 08P01 (a protocol violation) and which say what is wrong only
// in their message. Codes other than 08P01 count only when connecting:
// on a statement they are the statement's own errors.
func configRefusal(err error) bool {
	if err == nil {
		return false // before the targets of errors.As, which escape: no allocation on a statement's success
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	if pe.Code == "08P01" {
		return poolerRefusal(pe.Message) != ""
	}
	var conn *pgconn.ConnectError
	if !errors.As(err, &conn) {
		return false
	}
	return strings.HasPrefix(pe.Code, "28") || slices.Contains([]string{"3D000", "42501", "42704", "22023"}, pe.Code)
}

// poolerRefusals are the messages of PgBouncer's configuration refusals,
// each with what to do.
var poolerRefusals = []struct{ msg, hint string }{
	{"unsupported startup parameter", hintStartupParam},
	{"authentication failed", hintAuth},
	{"no such user", hintAuth},
	{"no such database", hintDatabase},
	{"does not exist", hintDatabase}, // PgBouncer passing on the server's 3D000 or 28000
	{"permission denied", hintPrivilege},
}

const (
	hintStartupParam = "remove that parameter from the server's DSN, or set it for the role or database (ALTER ROLE … SET) instead: a pooler passes on only the startup parameters it knows"
	hintAuth         = "check the user and password in the server's DSN against the server's roles and pg_hba.conf, or the pooler's auth_file"
	hintDatabase     = "check the database (and user) named in the server's DSN, and the pooler's [databases] section"
	hintPrivilege    = "grant the DSN's user CONNECT on the database, or use a user that has it"
	hintParam        = "fix or remove that parameter in the server's DSN"
	hintOther        = "fix the server's DSN or the pooler's configuration"
)

// poolerRefusal returns the hint for a PgBouncer refusal message, "" when
// the message is not a configuration refusal.
func poolerRefusal(msg string) string {
	for _, r := range poolerRefusals {
		if strings.Contains(msg, r.msg) {
			return r.hint
		}
	}
	return ""
}

// configHint says what to do about a configuration refusal.
func configHint(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return hintOther
	}
	switch {
	case pe.Code == "08P01":
		if h := poolerRefusal(pe.Message); h != "" {
			return h
		}
	case strings.HasPrefix(pe.Code, "28"):
		return hintAuth
	case pe.Code == "3D000":
		return hintDatabase
	case pe.Code == "42501":
		return hintPrivilege
	case pe.Code == "42704", pe.Code == "22023":
		return hintParam
	}
	return hintOther
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
		if s.downUntil.Swap(time.Now().UnixNano()+int64(retry)) == 0 {
			s.takenDown.Add(1)
		}
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
	if configRefusal(db.Error) {
		var ce *ConfigError
		if !errors.As(db.Error, &ce) {
			db.Error = &ConfigError{Server: server, Err: db.Error}
		}
		return
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
	stmt := db.Statement
	parent := stmt.Context
	if db.DryRun || parent == nil {
		exec(db)
		return
	}
	// A connection of the plugin's own bounds the statement itself
	// (stmtOpts): no context that can end, no timer or goroutine per
	// statement.
	t := p.stmtLimit(parent)
	ctx, cancel := parent, context.CancelFunc(nil)
	if o, ok := p.oneShardOpts(stmt, t); ok {
		if o != (stmtOpts{}) {
			ctx = context.WithValue(parent, stmtOptsKey{}, o)
		}
	} else if t > 0 {
		ctx, cancel = context.WithTimeout(parent, t)
	}
	stmt.Context = ctx
	exec(db)
	if cancel != nil {
		cancel()
	}
	stmt.Context = parent
	if t == 0 {
		return
	}
	if db.Error != nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(db.Error, errBoundPassed)) && parent.Err() == nil {
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
