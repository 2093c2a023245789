package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/router"
)

// openServer is the default OpenDB: database/sql over pgx, through a
// serverConnector, as Config.StatementCacheCapacity and StatementTimeout
// describe.
func openServer(cfg *Config, server, dsn string) (*sql.DB, error) {
	return openPrimary(cfg, server, dsn, router.Primary{})
}

// openPrimary is openServer for a server's primary pool, whose
// connections go only to the host that is the recorded primary rec (see
// router.Fence).
func openPrimary(cfg *Config, server, dsn string, rec router.Primary) (*sql.DB, error) {
	c, err := newFencedConnector(cfg, server, dsn, rec)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// serverConnector opens the connections of one server's pool. It keeps
// every connection pooler-safe unless the configuration opts in to named
// prepared statements, reports a connection refused for a configuration
// reason as a *ConfigError, and drops the statement_timeout it adds when
// a pooler refuses it as a startup parameter.
type serverConnector struct {
	server  string
	with    driver.Connector // with the plugin's statement_timeout, if it adds one
	without driver.Connector // without it: nil when the plugin adds none
	timeout time.Duration    // the statement_timeout the plugin adds
	startup time.Duration    // the bound on a session's start for a caller without a deadline, 0: none
	slots   chan struct{}    // one per connection attempt under way; nil: unbounded
	named   bool             // named prepared statements (StatementCacheCapacity > 0)
	log     *slog.Logger

	refused atomic.Bool // the server refused the plugin's statement_timeout
	logOnce sync.Once
	// dialing, when set (tests), is called by every attempt after it has
	// chosen whether to send statement_timeout and before it connects.
	dialing func()
	plans   planGeneration // of the reads across shards run prepared on this server
	// notPrimary, when set, is called when a connection is refused with
	// router.ErrNotPrimary: the map may be older than a failover's record.
	notPrimary func()
}

func newServerConnector(cfg *Config, server, dsn string) (*serverConnector, error) {
	return newFencedConnector(cfg, server, dsn, router.Primary{})
}

// newFencedConnector is newServerConnector whose connections go only to
// the recorded primary rec (nothing recorded: any host).
func newFencedConnector(cfg *Config, server, dsn string, rec router.Primary) (*serverConnector, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, &ConfigError{Server: server, Err: fmt.Errorf("parse its DSN: %w", pgdsn.Scrub(err))}
	}
	c := &serverConnector{server: server, log: cfg.Logger}
	// Only the recorded primary: an old primary back after a failover
	// gets no statement (see router.Fence).
	router.Fence(&pc.Config, server, rec)
	if c.log == nil {
		c.log = slog.Default()
	}
	if !strings.Contains(dsn, "connect_timeout") && cfg.ConnectTimeout > 0 {
		// Only reaching the server is bounded by ConnectTimeout, and
		// here rather than by pgx, so that a server that did not
		// accept the connection in time tells apart from a caller who
		// gave up first. A server that accepted it but is slow to
		// start the session is busy, not down: that wait is the
		// caller's (see Connect).
		pc.ConnectTimeout = 0
		pc.DialFunc = dialWithin(pc.DialFunc, cfg.ConnectTimeout)
	}
	switch {
	case cfg.StatementTimeout > 0:
		c.startup = cfg.StatementTimeout + deadlineGrace
	case cfg.StatementTimeout < 0:
		// No bound on statements is the caller's choice for what runs;
		// a session that has not started is no statement of theirs, and
		// a server that never starts it is frozen.
		c.startup = defaultStatementTimeout + deadlineGrace
		if cfg.unboundedStartup > 0 {
			c.startup = cfg.unboundedStartup
		}
	}
	if cfg.MaxConnecting > 0 {
		c.slots = make(chan struct{}, cfg.MaxConnecting)
	}
	if !strings.Contains(dsn, "default_query_exec_mode") && !strings.Contains(dsn, "statement_cache_capacity") {
		if cfg.StatementCacheCapacity > 0 {
			pc.StatementCacheCapacity = cfg.StatementCacheCapacity
		} else {
			// Every shard has its own SQL text, so a per-connection cache
			// of statements or descriptions meets thousands of texts and
			// mostly misses, while it grows the client's memory; exec
			// mode keeps nothing and still takes one round trip.
			pc.DefaultQueryExecMode = pgx.QueryExecModeExec
			// Reads across shards the plugin runs prepared
			// (PreparedReads) keep their statements in its own cache on
			// the connection (plugin/internal/readexec); pgx's holds only what runs
			// prepared through database/sql (asPrepared), at most this
			// many.
			pc.StatementCacheCapacity = preparedReadsPerConn
		}
	}
	// Named statements are safe only where the DSN or the configuration
	// asks for them: the DSN's own exec mode is the user's choice.
	c.named = pc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	c.with = stdlib.GetConnector(*pc)
	if _, set := pc.RuntimeParams["statement_timeout"]; !set && cfg.StatementTimeout > 0 {
		without := *pc
		without.RuntimeParams = maps.Clone(pc.RuntimeParams)
		c.without = stdlib.GetConnector(without)
		c.timeout = cfg.StatementTimeout
		pc.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
		c.with = stdlib.GetConnector(*pc)
	}
	return c, nil
}

// Driver is part of driver.Connector.
func (c *serverConnector) Driver() driver.Driver { return stdlib.GetDefaultDriver() }

// Connect is part of driver.Connector. A pooler that refuses the
// statement_timeout the plugin adds (PgBouncer refuses every startup
// parameter it does not track) gets a connection without it, from
// then on for this pool: the plugin's own deadline (Config.StatementTimeout
// plus a second) still bounds each statement, and the role's or database's
// statement_timeout bounds it on the server.
func (c *serverConnector) Connect(ctx context.Context) (driver.Conn, error) {
	start := time.Now()
	release, err := c.acquire(ctx)
	if err != nil {
		return nil, &BusyError{Server: c.server, Waited: time.Since(start), Err: fmt.Errorf("waiting for one of the %d connection attempts under way: %w", cap(c.slots), err)}
	}
	defer release()
	conn, err := c.dial(ctx)
	// Every attempt that sent the parameter and was refused dials again
	// without it: attempts under way when the first refusal arrives sent
	// it too, and must not fail for it.
	if err != nil && c.without != nil && refusesParam(err, "statement_timeout") {
		c.refused.Store(true)
		c.logOnce.Do(func() {
			c.log.Warn("shardkit: the server refuses statement_timeout as a startup parameter (a pooler such as PgBouncer); connecting without it. "+
				"Each statement is still bounded by the plugin's deadline; bound it on the server too with ALTER ROLE … SET statement_timeout (or ALTER DATABASE)",
				"server", c.server, "statement_timeout", c.timeout)
		})
		conn, err = c.dial(ctx)
	}
	if err != nil {
		if c.notPrimary != nil && errors.Is(err, router.ErrNotPrimary) {
			c.notPrimary()
		}
		return nil, c.classify(ctx, err, start)
	}
	if sc, ok := conn.(*stdlib.Conn); ok && !c.named {
		return unnamedConn{pgxConn: sc, plans: &c.plans}, nil
	}
	return conn, nil
}

// acquire takes one of the server's connection attempt slots, waiting
// within ctx: a process that needs many connections at once (a burst
// after start-up, a fleet restarted together) opens them a few at a time,
// so that a server busy with startups is not handed more of them than it
// can start, and the connections already open serve the rest meanwhile.
func (c *serverConnector) acquire(ctx context.Context) (release func(), err error) {
	if c.slots == nil {
		return func() {}, nil
	}
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	default:
	}
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial opens a connection. A caller without a deadline (database/sql's
// own openings, the plugin's start-up) waits for the session's start at
// most c.startup, the bound a statement has: a server that takes longer
// does not answer.
func (c *serverConnector) dial(ctx context.Context) (driver.Conn, error) {
	dc := c.with
	if c.without != nil && c.refused.Load() {
		dc = c.without
	}
	if c.dialing != nil {
		c.dialing()
	}
	if _, ok := ctx.Deadline(); ok || c.startup <= 0 {
		return dc.Connect(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, c.startup)
	defer cancel()
	conn, err := dc.Connect(sctx)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = &connectTimeoutError{after: c.startup, started: true, err: err}
	}
	return conn, err
}

// dialWithin bounds dial by d: a server that does not accept the TCP
// connection within d (no answer to the handshake: a host down or cut
// off) is unreachable.
func dialWithin(dial pgconn.DialFunc, d time.Duration) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		conn, err := dial(dctx, network, addr)
		if err != nil && ctx.Err() == nil && dctx.Err() != nil {
			err = &connectTimeoutError{after: d, err: err}
		}
		return conn, err
	}
}

// classify turns a refusal for a configuration reason into a
// *ConfigError naming the server, and a connection whose caller's
// context ended before the server started the session into a *BusyError:
// the server was reached and is slow, which is the caller's wait, not
// the server's failure.
func (c *serverConnector) classify(ctx context.Context, err error, start time.Time) error {
	if configRefusal(err) {
		return &ConfigError{Server: c.server, Err: err}
	}
	var ct *connectTimeoutError
	if ctx.Err() != nil && !errors.As(err, &ct) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || pgconn.Timeout(err)) {
		if cause := context.Cause(ctx); !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return &BusyError{Server: c.server, Waited: time.Since(start), Err: err}
	}
	return err
}

// connectTimeoutError reports a server that did not accept a connection
// within Config.ConnectTimeout (TCP), or did not start its session within
// a statement's bound for a caller without a deadline of its own, while
// the caller was still waiting: the server is unreachable or does not
// answer, unlike a connection whose caller gave up first.
type connectTimeoutError struct {
	after   time.Duration
	started bool // the TCP connection was made; the session did not start
	err     error
}

func (e *connectTimeoutError) Error() string {
	if e.started {
		return fmt.Sprintf("no session started within %v: %v", e.after, e.err)
	}
	return fmt.Sprintf("no connection within %v: %v", e.after, e.err)
}

func (e *connectTimeoutError) Unwrap() error { return e.err }

// unnamedConn is a pgx connection whose Prepare creates no named
// statement on the server. database/sql's Prepare (which GORM's
// PrepareStmt mode uses) would otherwise create one that lives as long
// as the *sql.Stmt: behind a transaction pooler it is left on one server
// connection while later statements run on others ("prepared statement
// does not exist"), or meets another client's of the same name ("already
// exists", SQLSTATE 42P05). Its statements run like any other statement
// of the connection: unnamed, except the reads across shards the plugin
// runs prepared (PreparedReads; see QueryContext).
type unnamedConn struct {
	*pgxConn
	plans *planGeneration // the server's
}

// pgxConn names the embedded connection so that its Conn method (the
// *pgx.Conn, which COPY and the warm-up use) is promoted rather than
// shadowed by a field named Conn.
type pgxConn = stdlib.Conn

// Prepare is part of driver.Conn (see unnamedConn).
func (c unnamedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext is part of driver.ConnPrepareContext (see unnamedConn).
func (c unnamedConn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	if c.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	return &unnamedStmt{c: c.pgxConn, sql: query}, nil
}

// unnamedStmt is a statement of an unnamedConn: its SQL, nothing on the
// server.
type unnamedStmt struct {
	c   *stdlib.Conn
	sql string
}

// Close is part of driver.Stmt: there is nothing to release.
func (s *unnamedStmt) Close() error { return nil }

// NumInput is part of driver.Stmt: -1, the server checks the arguments.
func (s *unnamedStmt) NumInput() int { return -1 }

// Exec is part of driver.Stmt; database/sql calls ExecContext.
func (s *unnamedStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("shardkit: Stmt.Exec without a context is not supported")
}

// Query is part of driver.Stmt; database/sql calls QueryContext.
func (s *unnamedStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("shardkit: Stmt.Query without a context is not supported")
}

// ExecContext is part of driver.StmtExecContext.
func (s *unnamedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.sql, args)
}

// QueryContext is part of driver.StmtQueryContext.
func (s *unnamedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.sql, args)
}

// refusesParam reports whether err is a pooler's refusal of the startup
// parameter name (PgBouncer: "unsupported startup parameter: name").
func refusesParam(err error, name string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.Contains(pe.Message, "unsupported startup parameter") &&
		strings.HasSuffix(strings.TrimSpace(pe.Message), name)
}
