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

	"github.com/shardkit/shardkit/plugin/internal/readexec"
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
		if c.stale(ctx, query, o.write, err) {
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
// keeps prepared: two read shapes of each of a server's 1000 shards. A
// read met for the first time on a connection costs one more round trip
// (its Prepare), and one for the Close of the statement it evicts: more
// read shapes than the cache holds cost more than unnamed statements.
var preparedShardStmtsPerConn = 2048 // a variable for the tests of its bound

// preparedShardWritesPerConn is the most one-shard writes (INSERT,
// UPDATE, DELETE) a connection keeps prepared, in a cache of their own:
// two write shapes of each of a server's 1000 shards. A write met for the
// first time on a connection costs one more round trip (its Prepare), and
// one for the Close of the write it evicts.
var preparedShardWritesPerConn = 2048 // a variable for the tests of its bound

// A connection's prepared statements hold its backend's memory, at most
// preparedBytesPerConn of it in all, as their sizes were measured on
// Postgres 15 with pg_backend_memory_contexts (generic plans; the tests
// TestOneShardReadsMemory and TestOneShardWritesMemory hold them to these
// figures): a one-shard read by ID or by key about 17 KB, a one-shard
// insert or update by ID about 9 KB, a read across shards of up to 100
// tables about 1.3 MB (docs/reads-across-shards.md). The two caches of
// one-shard statements share what the reads across shards leave: all of
// it on a connection that has run none, preparedBytesPerConn less the
// whole bound of the reads across shards (preparedReadsPerConn of them)
// on one that has. A connection over its share (its first read across
// shards shrank it) closes its least recently used one-shard statements
// until it is within: one each time it runs one of them, and up to
// shedPerRun more than it needs each time it prepares one.
var preparedBytesPerConn = 64 << 20 // a variable for the tests of its bound

const (
	oneShardReadBytes  = 17 << 10
	oneShardWriteBytes = 9 << 10
	readAcrossBytes    = 1331 << 10
	shedPerRun         = 16
)

// oneShardShare is how many bytes of preparedBytesPerConn the one-shard
// statements of connection c may hold.
func oneShardShare(c *pgconn.PgConn) int {
	if readexec.HasReadCache(c) {
		return preparedBytesPerConn - preparedReadsPerConn*readAcrossBytes
	}
	return preparedBytesPerConn
}

// shardStmtsKey is the key of a connection's shardCaches in its
// CustomData.
const shardStmtsKey = "shardkit.oneshard"

// shardCaches are a connection's prepared one-shard statements: its
// reads', its writes'. Only the goroutine holding the connection uses
// them.
type shardCaches struct {
	reads, writes shardStmts
}

// bytes is what the connection's one-shard statements hold of its
// backend's memory.
func (sc *shardCaches) bytes() int { return sc.reads.bytes() + sc.writes.bytes() }

// shardStmts is a connection's prepared one-shard statements of one kind
// by text, least recently used at the back.
type shardStmts struct {
	byText map[string]*list.Element // of *shardStmt
	lru    list.List
	max    int // the most it keeps
	each   int // the bytes each holds of its backend's memory
}

// shardStmt is a one-shard statement prepared on a connection: its text,
// and the name it is prepared under (shardStmtName) in plan generation
// gen. The name is kept, not derived again on each run: a digest of the
// text costs a one-shard read about a microsecond of client CPU.
type shardStmt struct {
	text, name string
	gen        int64
}

func stmtAt(el *list.Element) *shardStmt { return el.Value.(*shardStmt) }

func (ss *shardStmts) bytes() int { return ss.lru.Len() * ss.each }

// shardCachesOf is the connection's caches of prepared one-shard
// statements.
func shardCachesOf(c *pgconn.PgConn) *shardCaches {
	cd := c.CustomData()
	sc, _ := cd[shardStmtsKey].(*shardCaches)
	if sc == nil {
		sc = &shardCaches{
			reads:  shardStmts{byText: map[string]*list.Element{}, max: preparedShardStmtsPerConn, each: oneShardReadBytes},
			writes: shardStmts{byText: map[string]*list.Element{}, max: preparedShardWritesPerConn, each: oneShardWriteBytes},
		}
		cd[shardStmtsKey] = sc
	}
	return sc
}

// of returns the cache of writes (write) or reads, and the other.
func (sc *shardCaches) of(write bool) (own, other *shardStmts) {
	if write {
		return &sc.writes, &sc.reads
	}
	return &sc.reads, &sc.writes
}

// prepared returns the name under which query is prepared on the
// connection in the server's plan generation, preparing it if it is not
// yet, and closing the least recently used statements to make room: of
// its own kind (a write, or a read) past that kind's count, and of its
// own kind first, then of the other, past the connection's share of
// memory (oneShardShare). The name is the digest of the generation and
// the text, never the text itself: pgx runs a statement prepared under a
// text whenever that text comes again, so a statement named by its own
// text would also run where the plugin sends the text unnamed (a raw
// statement of the same text, or the unnamed run after a stale plan),
// and fail there once its result type changed.
func (c unnamedConn) prepared(ctx context.Context, query string, write bool) (string, error) {
	gen := c.plans.n.Load()
	conn := c.Conn()
	sc := shardCachesOf(conn.PgConn())
	own, other := sc.of(write)
	share := oneShardShare(conn.PgConn())
	if el, ok := own.byText[query]; ok {
		st := stmtAt(el)
		if st.gen == gen {
			own.lru.MoveToFront(el)
			return st.name, c.shed(ctx, sc, own, other, 0, share, 1, el)
		}
		// Prepared in an earlier generation: its plan may not have the
		// result type the server gives the text now.
		if err := c.forget(ctx, own, el); err != nil {
			return "", err
		}
	}
	for own.lru.Len() >= own.max {
		if err := c.forget(ctx, own, own.lru.Back()); err != nil {
			return "", err
		}
	}
	if err := c.shed(ctx, sc, own, other, own.each, share, 1+shedPerRun, nil); err != nil {
		return "", err
	}
	name := shardStmtName(query, gen)
	if _, err := conn.Prepare(ctx, name, query); err != nil {
		return "", err
	}
	own.byText[query] = own.lru.PushFront(&shardStmt{text: query, name: name, gen: gen})
	return name, nil
}

// shed closes the least recently used one-shard statements, own's
// first, until room more bytes fit in share, at most most of them, and
// never keep (the statement about to run).
func (c unnamedConn) shed(ctx context.Context, sc *shardCaches, own, other *shardStmts, room, share, most int, keep *list.Element) error {
	for n := 0; n < most && sc.bytes()+room > share; n++ {
		ss := own
		if ss.lru.Len() == 0 || ss.lru.Back() == keep {
			ss = other
		}
		if ss.lru.Len() == 0 || ss.lru.Back() == keep {
			return nil
		}
		if err := c.forget(ctx, ss, ss.lru.Back()); err != nil {
			return err
		}
	}
	return nil
}

// shardStmtName is the name a one-shard statement of text is prepared
// under in plan generation gen.
func shardStmtName(text string, gen int64) string {
	h := sha256.Sum256([]byte(strconv.FormatInt(gen, 10) + "\x00" + text))
	return "shardkit_one_" + hex.EncodeToString(h[:16])
}

// forget closes the statement of el, one of ss's.
func (c unnamedConn) forget(ctx context.Context, ss *shardStmts, el *list.Element) error {
	st := stmtAt(el)
	delete(ss.byText, st.text)
	ss.lru.Remove(el)
	return c.Conn().Deallocate(ctx, st.name)
}

// stale reports whether a prepared one-shard statement met a result
// type changed under it ("cached plan must not change result type", a
// column added under SELECT *) outside a transaction, where it can run
// again unnamed, planned afresh. It starts the server's next plan
// generation and closes the statement, so that the next run prepares
// it after the change.
func (c unnamedConn) stale(ctx context.Context, query string, write bool, err error) bool {
	if err == nil || !planChanged(err) {
		return false
	}
	gen := c.plans.n.Load()
	c.plans.n.CompareAndSwap(gen, gen+1)
	own, _ := shardCachesOf(c.Conn().PgConn()).of(write)
	if el, ok := own.byText[query]; ok {
		_ = c.forget(ctx, own, el)
	}
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
	if c.stale(ctx, query, o.write, err) {
		return c.pgxConn.ExecContext(ctx, query, args)
	}
	return res, err
}
