package plugin

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// PreparedReads says where reads across shards run as named prepared
// statements. Postgres plans a read of many shard tables in about 22 µs a
// table, which a prepared statement pays once per connection; a
// statement of one shard plans in microseconds and stays unnamed
// whatever this says (every shard has its own text, so caching them would
// meet thousands of texts). A named statement lives on its server
// connection: behind a transaction pooler that does not carry prepared
// statements it would meet another client's, or be missing on the
// connection the next statement gets.
type PreparedReads uint8

const (
	// PreparedReadsDirect prepares reads across shards on servers whose
	// application DSN is their admin DSN (no pooler between), and sends
	// them unnamed through a pooler and to replicas. The default.
	PreparedReadsDirect PreparedReads = iota
	// PreparedReadsAlways prepares them on every server and replica: for
	// poolers that carry protocol-level prepared statements in transaction
	// mode (PgBouncer 1.21 or later with max_prepared_statements set,
	// PgDog).
	PreparedReadsAlways
	// PreparedReadsNever sends every statement unnamed (pgx's exec mode):
	// planned by the server each time.
	PreparedReadsNever
)

// preparedReadsPerConn is the most prepared reads a connection keeps; the
// least recently used is closed (readCache) to make room for a new one,
// so a server backend's cached plans stay bounded. A
// statement reads at most 100 tables (unionBatch), and its cached plan
// holds about 1.3 MB of the backend's memory for an ordered read, 0.65 MB
// for a count (measured on Postgres 15, docs/reads-across-shards.md): 32
// of them hold at most about 42 MB, three read shapes of a server's 1000
// shards.
const preparedReadsPerConn = 32

// namedReads reports whether a pool of server srv (its primary, or with
// replica set one of its replicas) runs reads across shards as named
// statements: the plugin opens the pool itself (another OpenDB's driver
// may not take pgx's exec mode as an argument), its DSN leaves the
// statement cache to the plugin, and PreparedReads allows it there.
func (c *Config) namedReads(srv router.Server, dsn string, replica bool) bool {
	if c.OpenDB != nil || strings.Contains(dsn, "statement_cache_capacity") || strings.Contains(dsn, "default_query_exec_mode") {
		return false
	}
	switch c.PreparedReads {
	case PreparedReadsAlways:
		return true
	case PreparedReadsDirect:
		return !replica && srv.Direct()
	}
	return false
}

// asPrepared is the argument that makes pgx run a statement as a named
// prepared statement from the connection's statement cache, whatever the
// connection's default mode.
var asPrepared any = pgx.QueryExecModeCacheStatement

// planGeneration counts the schema changes seen to alter the result of a
// read across shards prepared on one server. A pooler that carries
// prepared statements (PgBouncer 1.21+) keeps one server statement per
// text for all its clients and never drops one for failing with "cached
// plan must not change result type": the same text would fail on every
// later run until the pooler's server connections are renewed. A new
// generation gives every prepared read of the server a new text, so it is
// prepared afresh, after the change, once per connection; other processes
// of the application reach the same generation, and so the same texts,
// on their first failure.
type planGeneration struct{ n atomic.Int64 }

// text is query as sent in generation gen.
func (*planGeneration) text(query string, gen int64) string {
	if gen == 0 {
		return query
	}
	return "/* shardkit plans " + strconv.FormatInt(gen, 10) + " */ " + query
}

// QueryContext is part of driver.QueryerContext. A read the plugin runs
// prepared (asPrepared is its first argument) is sent in the server's
// plan generation, and a result type changed under it starts the next
// generation (once, however many connections fail at the same time).
func (c unnamedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.plans == nil || len(args) == 0 || args[0].Value != asPrepared {
		return c.pgxConn.QueryContext(ctx, query, args)
	}
	gen := c.plans.n.Load()
	rows, err := c.pgxConn.QueryContext(ctx, c.plans.text(query, gen), args)
	if err != nil && planChanged(err) {
		c.plans.n.CompareAndSwap(gen, gen+1)
	}
	return rows, err
}
