package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/plugin/dbresolver"

	"github.com/shardkit/shardkit/router"
)

// Defaults of Config, filled in by Register.
const (
	defaultFenceWait        = 2 * time.Second
	defaultMaxOpenConns     = 20
	defaultMaxIdleConns     = 10
	defaultConnMaxIdleTime  = 5 * time.Minute
	defaultConnectTimeout   = 5 * time.Second
	defaultMaxConnecting    = 4
	defaultServerRetry      = time.Second
	defaultStatementTimeout = 30 * time.Second
	defaultWarmUpTimeout    = 2 * time.Second
)

// defaultStatementCacheCapacity is a per-connection prepared statement
// cache for Config.StatementCacheCapacity, for those who opt in to named
// prepared statements: pgx's default of 512 would be evicted and
// re-prepared constantly with 2000 shards, each with its own
// schema-qualified SQL text.
const defaultStatementCacheCapacity = 4096

// defaultCopyWorkers is how many parts of one CopyFrom run at once on
// each server unless CopyWorkers says otherwise.
const defaultCopyWorkers = 4

// IDSource issues IDs for new rows. *idgen.Generator satisfies it. When Next
// fails with an error for which NoSlot reports true, the row takes its key
// from the column's DEFAULT next_id() instead.
type IDSource interface {
	Next(ctx context.Context, shard int) (int64, error)
}

// ShardMap is what the plugin needs of the shard map: the snapshot in
// force, a reload when a server says the map changed (a write refused by a
// move's barrier), and notice of each new snapshot. *router.Router
// implements it.
type ShardMap interface {
	Snapshot() *router.Snapshot
	Reload(ctx context.Context) (*router.Snapshot, error)
	Subscribe() (<-chan *router.Snapshot, func())
}

var _ ShardMap = (*router.Router)(nil)

// WarmUpMode is Config.WarmUp: whether and how start-up warms every
// shard's tables.
type WarmUpMode int

const (
	// WarmUpOff (the default) warms nothing at start-up: the first read
	// across shards opens the tables it reads.
	WarmUpOff WarmUpMode = iota
	// WarmUpBlocking warms before Register's Initialize (db.Use) returns,
	// within Config.WarmUpTimeout.
	WarmUpBlocking
	// WarmUpBackground warms after db.Use returns, on one connection per
	// server, within Config.WarmUpTimeout: start-up does not wait for it,
	// and reads that come while it runs use other connections, cold ones.
	WarmUpBackground
)

// String names the mode as its constant does.
func (m WarmUpMode) String() string {
	switch m {
	case WarmUpOff:
		return "WarmUpOff"
	case WarmUpBlocking:
		return "WarmUpBlocking"
	case WarmUpBackground:
		return "WarmUpBackground"
	}
	return fmt.Sprintf("WarmUpMode(%d)", int(m))
}

// Config configures the plugin. Only Router is required.
type Config struct {
	// Router holds the current shard map. Required: a *router.Router
	// (call its Watch in a goroutine so that map changes take effect
	// without restart), or for tests a map made by hand
	// (router.NewFixed).
	Router ShardMap
	// IDs issues primary keys in Go before the insert. Nil means every new
	// row takes its key from the column's DEFAULT next_id(), read back with
	// RETURNING.
	IDs IDSource
	// NoSlot reports whether an error from IDs means "no slot, use the
	// database default" rather than a failure. Nil means idgen's
	// ErrNoFreeSlot, ErrLeaseLost and ErrLeaseExpired.
	NoSlot func(error) bool
	// FenceWait bounds how long a write to a fenced shard waits for the
	// move to finish before failing with ErrShardFenced. A switchover's
	// fence (failover.Switchover) holds the write past FenceWait for as
	// long as its lease in the catalog lasts (failover.Options.Lease, 10s
	// by default), within the statement's context. Zero means 2s;
	// negative means fail at once.
	FenceWait time.Duration
	// MaxOpenConns, MaxIdleConns and ConnMaxIdleTime apply to each physical
	// server's pool (the primary and each replica). Zero means the
	// Default… constant; negative means unlimited (MaxOpenConns), none
	// (MaxIdleConns) or forever (ConnMaxIdleTime).
	MaxOpenConns    int
	MaxIdleConns    int
	ConnMaxIdleTime time.Duration
	// ReplicaPolicy picks a replica for reads on servers that have some.
	// Nil means dbresolver.RandomPolicy. Reads go to the primary when the
	// statement carries dbresolver.Write or a locking clause.
	ReplicaPolicy dbresolver.Policy
	// PreparedReads and StatementCacheCapacity split the statements
	// between them: reads (a read of one shard that GORM builds, and each
	// statement of a read across shards) and one-shard writes that GORM
	// builds (an insert of one row, an update, a delete) follow
	// PreparedReads, everything else (raw SQL, an insert of many rows, a
	// write returning every column, a transaction's Raw)
	// StatementCacheCapacity (docs/pooler.md, "Execution modes and what
	// they cost").
	//
	// PreparedReads says where those run as named prepared statements,
	// each connection keeping at most 2048 reads of one shard, 2048
	// writes and 32 reads across shards, least recently used closed
	// first. The zero value, PreparedReadsDirect, names them on the
	// primaries the catalog records the application reaches directly
	// (router.Server.Direct) and sends
	// them unnamed through a pooler and to replicas; PreparedReadsAlways
	// names them everywhere (a pooler that carries prepared statements);
	// PreparedReadsNever nowhere.
	PreparedReads PreparedReads
	// StatementCacheCapacity says how the default OpenDB runs the
	// statements that are not reads. Zero (the default) sends them
	// unnamed, with their parameters typed by the server, parsed and
	// planned by the server every time, in one round trip (pgx's exec
	// mode), and caches nothing in the client; database/sql's Prepare
	// (GORM's PrepareStmt) creates nothing on the server either. That is
	// safe behind a transaction pooler (PgBouncer in transaction mode),
	// and costs no memory per statement on either side: every shard has
	// its own SQL text, so per-connection caches meet thousands of texts.
	// A positive value names every statement of the connection instead,
	// reads included, up to that many per connection (pgx's
	// cache_statement): less server CPU per statement, but each holds
	// server memory on its connection, and it is safe only on direct
	// connections or behind a pooler that tracks prepared statements
	// (PgBouncer 1.21+ with max_prepared_statements, PgDog). 4096 is a
	// size for that. Negative means the same as zero. A DSN that sets
	// statement_cache_capacity or default_query_exec_mode wins over both
	// fields: the plugin then names no read of its own.
	StatementCacheCapacity int
	// SkipTableCheck skips the start-up check that every registered
	// model's table exists in each shard schema, and that no string
	// shard key or text lookup column compares case-insensitively (citext,
	// a nondeterministic collation: refused, as its rows could not be
	// routed by their bytes). False (the default) checks, with two
	// queries per server.
	SkipTableCheck bool
	// ConnectTimeout bounds reaching a server (its TCP connection) by the
	// default OpenDB: a server that does not accept a connection in time
	// is taken as down for ServerRetry. A server that accepted it but is
	// slow to start the session (busy: hundreds of processes starting at
	// once) is not down: the statement waits for it within its caller's
	// deadline and StatementTimeout, and a caller's deadline that passes
	// first arrives as a *BusyError (ErrServerBusy, and the context's
	// error), the server still up. Only a session not started within
	// StatementTimeout (plus a second) takes the server as down, as a
	// statement that gets no answer does: a frozen server. A DSN's
	// connect_timeout wins, and bounds the whole connection as pgx does.
	// Zero means 5s; negative means none.
	ConnectTimeout time.Duration
	// MaxConnecting bounds the connection attempts under way at once to
	// each server (its primary and each replica) by the default OpenDB:
	// statements beyond it wait, within their deadline, for an attempt to
	// finish, so that a burst or a fleet starting together does not hand
	// a busy server more session starts than it can serve. Zero means
	// 4; negative means no bound.
	MaxConnecting int
	// ServerRetry is how long a server whose connection failed is taken
	// as down: its statements fail at once with ErrServerUnavailable,
	// then one statement tries it again. Zero means 1s;
	// negative means never take a server as down.
	ServerRetry time.Duration
	// StatementTimeout bounds each statement on a server: the default
	// OpenDB sets the servers' statement_timeout to it as a startup
	// parameter (a DSN's statement_timeout wins), so a slow statement
	// ends with Postgres's own error, and the plugin stops waiting one
	// second later, with a *ServerError, for a server that does not
	// answer at all (frozen, or cut off without a reset). A pooler that
	// refuses the startup parameter (PgBouncer refuses those it does not
	// track) gets connections without it, logged once: then
	// set statement_timeout on the server for the DSN's role or database
	// (ALTER ROLE … SET statement_timeout), at most this value, so that
	// slow statements end on the server before the plugin's deadline
	// takes the server as down. Rows, Row and Exec of raw SQL are not
	// bounded by the plugin; give their context a deadline. Zero means
	// 30s; negative means none on statements, while
	// a session's start (no statement of the caller's runs yet) is still
	// bounded by 30s plus a second, so that a frozen
	// server is an outage within a bound, not a wait without end.
	StatementTimeout time.Duration
	// WarmUp says whether start-up opens every registered table of every
	// shard on one connection per server, so that the first read across a
	// server's shards on that connection does not pay for opening them
	// (see WarmUpMode). The zero value, WarmUpOff, leaves that to the
	// first read across shards, which opens what it reads, while
	// single-shard statements open only their shard's tables: on direct
	// connections every process has backends of its own, and a fleet that
	// each warmed them would make every server open every table once per
	// process, several times the CPU of the rest of a process's start and
	// a backend a few times larger, for reads across shards most processes
	// may not make soon (docs/scale.md measures it). Use WarmUpBlocking or
	// WarmUpBackground for a few long-lived processes that read across
	// shards soon after they start.
	WarmUp WarmUpMode
	// WarmUpTimeout bounds the start-up warm-up: what is not warmed by
	// then is left to the first read that needs it, so a process's
	// start-up stays short when many start at once against the same
	// servers. Zero means 2s; negative means no bound. It has no effect
	// with WarmUpOff.
	WarmUpTimeout time.Duration
	// OpenDB opens a server's pool from its DSN. Nil means database/sql
	// over pgx, as StatementCacheCapacity, ConnectTimeout and
	// StatementTimeout describe, with configuration refusals reported as
	// a *ConfigError naming the server. With another OpenDB those fields
	// are the function's business, and a connection that times out is
	// not told apart from a caller who gave up: it does not take the
	// server as down.
	OpenDB func(dsn string) (*sql.DB, error)
	// Logger receives the plugin's notices (a pooler refusing the
	// statement_timeout startup parameter). Nil means slog.Default().
	Logger *slog.Logger

	// unboundedStartup replaces the bound on a session's start under a
	// negative StatementTimeout (30s plus a second):
	// a seam for tests, which cannot wait half a minute.
	unboundedStartup time.Duration
}

func (c Config) withDefaults() Config {
	if c.FenceWait == 0 {
		c.FenceWait = defaultFenceWait
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = defaultMaxOpenConns
	}
	if c.MaxIdleConns == 0 {
		c.MaxIdleConns = defaultMaxIdleConns
	}
	if c.ConnMaxIdleTime == 0 {
		c.ConnMaxIdleTime = defaultConnMaxIdleTime
	}
	if c.ReplicaPolicy == nil {
		c.ReplicaPolicy = dbresolver.RandomPolicy{}
	}
	if c.NoSlot == nil {
		c.NoSlot = defaultNoSlot
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = defaultConnectTimeout
	}
	if c.MaxConnecting == 0 {
		c.MaxConnecting = defaultMaxConnecting
	}
	if c.ServerRetry == 0 {
		c.ServerRetry = defaultServerRetry
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = defaultStatementTimeout
	}
	if c.WarmUpTimeout == 0 {
		c.WarmUpTimeout = defaultWarmUpTimeout
	}
	return c
}
