package plugin

import (
	"container/list"
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/shardkit/shardkit/router"
)

// PreparedReads says where reads across shards, and the reads of one
// shard that GORM builds, run as named prepared statements. Postgres
// plans a read of many shard tables in about 22 µs a table, which a
// prepared statement pays once per connection; a statement of one shard
// parsed and planned on every run costs its server about 2.7 times the
// CPU of its prepared run, and its client the Describe of every run. A
// named statement lives on its server connection: behind a transaction pooler that does not carry prepared
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
	o := optsOf(ctx)
	nc, at := c.deadline(o.bound)
	rows, err := c.query(ctx, query, args, o)
	if nc == nil {
		return rows, err
	}
	if sr, ok := rows.(*stdlib.Rows); ok && err == nil {
		return &boundRows{Rows: sr, nc: nc, at: at}, nil
	}
	_ = nc.SetDeadline(time.Time{})
	if err == nil {
		_ = rows.Close()
		return nil, fmt.Errorf("shardkit: rows of type %T", rows)
	}
	return rows, passed(err, at)
}

func (c unnamedConn) query(ctx context.Context, query string, args []driver.NamedValue, o stmtOpts) (driver.Rows, error) {
	if o.prepare {
		text, err := c.prepared(ctx, query, o.write)
		if err != nil {
			return nil, err
		}
		rows, err := c.pgxConn.QueryContext(ctx, text, args)
		if c.stale(ctx, text, o.write, err) {
			return c.pgxConn.QueryContext(ctx, query, args)
		}
		return rows, err
	}
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

// A statement of one shard that GORM built (a read, an insert, an update
// or a delete) runs as a named prepared statement on servers where reads
// across shards may (PreparedReads, serverDB.named): unnamed, the server
// parses and plans it on every run, and the client describes it every
// time, which costs a one-shard read more server and client CPU than the
// read itself, and a one-shard write about as much as the write. Each
// shard has its own text, so each connection keeps its own statements,
// least recently used closed first (shardStmts): reads and writes in
// caches of their own, so that a burst of writes to many shards closes no
// read, at most preparedShardStmtsPerConn reads and
// preparedShardWritesPerConn writes. The context of such a statement
// says so (stmtOpts, bounded); the connection (unnamedConn) prepares its
// text on first use.

// preparedShardStmtsPerConn is the most one-shard reads a connection
// keeps prepared. A cached one-shard read holds about 17 KB of its
// backend's memory, by ID or by key (measured on Postgres 15 with
// pg_backend_memory_contexts, generic plans): 2048 of them hold at most
// about 36 MB, two read shapes of each of a server's 1000 shards; the
// reads across shards add at most 42 MB (preparedReadsPerConn). A read
// met for the first time on a connection costs one more round trip (its
// Prepare), and one for the Close of the statement it evicts: more read
// shapes than the cache holds cost more than unnamed statements.
var preparedShardStmtsPerConn = 2048 // a variable for the tests of its bound

// preparedShardWritesPerConn is the most one-shard writes (INSERT,
// UPDATE, DELETE) a connection keeps prepared, in a cache of their own:
// a cached insert or update by ID holds about 9 KB of its backend's
// memory (measured on Postgres 15 with pg_backend_memory_contexts,
// TestOneShardWritesMemory): 2048 of them hold at most about 18 MB, two
// write shapes of each of a server's 1000 shards. A write met for the
// first time on a connection costs one more round trip (its Prepare),
// and one for the Close of the write it evicts.
var preparedShardWritesPerConn = 2048 // a variable for the tests of its bound

// shardStmtsKey and shardWritesKey are the keys of a connection's
// shardStmts in its CustomData: its reads', its writes'.
const (
	shardStmtsKey  = "shardkit.oneshard"
	shardWritesKey = "shardkit.oneshard.writes"
)

// shardStmts is a connection's prepared one-shard statements of one kind
// by name (shardStmtName), least recently used at the back. Only the
// goroutine holding the connection uses it.
type shardStmts struct {
	byText map[string]*list.Element // of string, the text
	lru    list.List
	max    int // the most it keeps
}

// shardStmtsOf is the connection's cache of prepared one-shard writes
// (write) or reads.
func shardStmtsOf(c *pgconn.PgConn, write bool) *shardStmts {
	key, max := shardStmtsKey, preparedShardStmtsPerConn
	if write {
		key, max = shardWritesKey, preparedShardWritesPerConn
	}
	cd := c.CustomData()
	ss, _ := cd[key].(*shardStmts)
	if ss == nil {
		ss = &shardStmts{byText: map[string]*list.Element{}, max: max}
		cd[key] = ss
	}
	return ss
}

// prepared returns the name under which query is prepared on the
// connection in the server's plan generation, preparing it, and closing
// the least recently used of its kind (a write, or a read) to make room,
// if it is not yet. The name is the digest of the generation and the
// text, never the text itself: pgx runs a statement prepared under a
// text whenever that text comes again, so a statement named by its own
// text would also run where the plugin sends the text unnamed (a raw
// statement of the same text, or the unnamed run after a stale plan),
// and fail there once its result type changed.
func (c unnamedConn) prepared(ctx context.Context, query string, write bool) (string, error) {
	name := shardStmtName(query, c.plans.n.Load())
	conn := c.Conn()
	ss := shardStmtsOf(conn.PgConn(), write)
	if el, ok := ss.byText[name]; ok {
		ss.lru.MoveToFront(el)
		return name, nil
	}
	for ss.lru.Len() >= ss.max {
		if err := c.forget(ctx, ss, ss.lru.Back().Value.(string)); err != nil {
			return "", err
		}
	}
	if _, err := conn.Prepare(ctx, name, query); err != nil {
		return "", err
	}
	ss.byText[name] = ss.lru.PushFront(name)
	return name, nil
}

// shardStmtName is the name a one-shard statement of text is prepared
// under in plan generation gen.
func shardStmtName(text string, gen int64) string {
	h := sha256.Sum256([]byte(strconv.FormatInt(gen, 10) + "\x00" + text))
	return "shardkit_one_" + hex.EncodeToString(h[:16])
}

// forget closes the statement prepared under name.
func (c unnamedConn) forget(ctx context.Context, ss *shardStmts, name string) error {
	if el, ok := ss.byText[name]; ok {
		delete(ss.byText, name)
		ss.lru.Remove(el)
	}
	return c.Conn().Deallocate(ctx, name)
}

// stale reports whether a prepared one-shard statement met a result
// type changed under it ("cached plan must not change result type", a
// column added under SELECT *) outside a transaction, where it can run
// again unnamed, planned afresh. It starts the server's next plan
// generation and closes the statement, so that the next run prepares
// it after the change.
func (c unnamedConn) stale(ctx context.Context, name string, write bool, err error) bool {
	if err == nil || !planChanged(err) {
		return false
	}
	gen := c.plans.n.Load()
	c.plans.n.CompareAndSwap(gen, gen+1)
	_ = c.forget(ctx, shardStmtsOf(c.Conn().PgConn(), write), name)
	return c.Conn().PgConn().TxStatus() == 'I'
}

// ExecContext is part of driver.ExecerContext: a one-shard statement
// bounded and run prepared as its context says (stmtOpts).
func (c unnamedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	o := optsOf(ctx)
	nc, at := c.deadline(o.bound)
	res, err := c.exec(ctx, query, args, o)
	if nc != nil {
		_ = nc.SetDeadline(time.Time{})
	}
	return res, passed(err, at)
}

func (c unnamedConn) exec(ctx context.Context, query string, args []driver.NamedValue, o stmtOpts) (driver.Result, error) {
	if !o.prepare {
		return c.pgxConn.ExecContext(ctx, query, args)
	}
	text, err := c.prepared(ctx, query, o.write)
	if err != nil {
		return nil, err
	}
	res, err := c.pgxConn.ExecContext(ctx, text, args)
	if c.stale(ctx, text, o.write, err) {
		return c.pgxConn.ExecContext(ctx, query, args)
	}
	return res, err
}
