package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// serverDB is one physical server's primary pool. Its own type lets the
// route callback tell a pool it set from one the caller chose.
type serverDB struct {
	*sql.DB
	name      string
	downUntil atomic.Int64    // unix ns until which the server is taken as down; 0: up
	replicas  []gorm.ConnPool // replica pools, possibly none
	repDBs    []*sql.DB
}

// pools opens one pool per physical server on first use and keeps it.
type pools struct {
	cfg *Config
	mu  sync.RWMutex
	by  map[string]*serverDB
}

func (ps *pools) get(snap *router.Snapshot, name string) (*serverDB, error) {
	ps.mu.RLock()
	s, ok := ps.by[name]
	ps.mu.RUnlock()
	if ok {
		return s, nil
	}
	srv, ok := snap.Server(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", router.ErrUnknownServer, name)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if s, ok := ps.by[name]; ok {
		return s, nil
	}
	primary, err := ps.open(srv.DSN)
	if err != nil {
		return nil, fmt.Errorf("shardkit: open server %s: %w", name, err)
	}
	s = &serverDB{DB: primary, name: name}
	for _, dsn := range srv.Replicas {
		r, err := ps.open(dsn)
		if err != nil {
			_ = primary.Close()
			return nil, fmt.Errorf("shardkit: open a replica of server %s: %w", name, err)
		}
		s.replicas = append(s.replicas, r)
		s.repDBs = append(s.repDBs, r)
	}
	if ps.by == nil {
		ps.by = map[string]*serverDB{}
	}
	ps.by[name] = s
	return s, nil
}

func (ps *pools) open(dsn string) (*sql.DB, error) {
	db, err := ps.cfg.OpenDB(dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(max(ps.cfg.MaxOpenConns, 0))
	db.SetMaxIdleConns(max(ps.cfg.MaxIdleConns, 0))
	db.SetConnMaxIdleTime(max(ps.cfg.ConnMaxIdleTime, 0))
	return db, nil
}

func (ps *pools) close() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var errs []error
	for _, s := range ps.by {
		errs = append(errs, s.DB.Close())
		for _, r := range s.repDBs {
			errs = append(errs, r.Close())
		}
	}
	ps.by = nil
	return errors.Join(errs...)
}

// DefaultStatementCacheCapacity is the per-connection prepared statement
// cache of the server pools the default OpenDB opens.
const DefaultStatementCacheCapacity = 4096

// openPgx is the default Config.OpenDB: database/sql over pgx, with
// prepared statements like plain GORM, but a larger statement cache
// unless the DSN sets one (statement_cache_capacity) or another
// default_query_exec_mode. Every logical shard has its own
// schema-qualified SQL text, so pgx's default of 512 statements per
// connection would be evicted and re-prepared constantly with 2000
// shards; unprepared statements (cache_describe) cost a parse and plan
// on every query, which measured ~3x slower for a lookup by primary key.
// Each cached statement holds server memory on its connection: lower
// the capacity, or use default_query_exec_mode=cache_describe in the
// servers' DSNs, where that matters more than latency.
func openPgx(capacity int, connect, statement time.Duration) func(dsn string) (*sql.DB, error) {
	return func(dsn string) (*sql.DB, error) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(dsn, "connect_timeout") && connect > 0 {
			cfg.ConnectTimeout = connect
		}
		if _, set := cfg.RuntimeParams["statement_timeout"]; !set && statement > 0 {
			cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(statement.Milliseconds(), 10)
		}
		if !strings.Contains(dsn, "default_query_exec_mode") && !strings.Contains(dsn, "statement_cache_capacity") {
			if capacity < 0 {
				cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
				cfg.DescriptionCacheCapacity = DefaultStatementCacheCapacity
			} else {
				cfg.StatementCacheCapacity = capacity
			}
		}
		return stdlib.OpenDB(*cfg), nil
	}
}

// rootPool wraps the gorm.DB's own connection pool (the default
// connection). Unsharded statements pass through it unchanged; BeginTx
// returns a shardTx so that transactions open on the server their first
// sharded statement (or their Shard scope) names.
type rootPool struct {
	gorm.ConnPool
	p *Plugin
}

// BeginTx is part of gorm.ConnPoolBeginner. Nothing is sent to any server
// until the transaction's first statement, unless the context carries a
// Shard or ShardOfID scope: then the transaction begins on that shard's
// server at once, with search_path set to the shard's schema.
func (r *rootPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	// Plain GORM begins on the default connection at once, and so fails on
	// a context that has ended; the plugin begins lazily, so it asks first.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tx := &shardTx{p: r.p, ctx: ctx, opts: opts, base: r.ConnPool, shard: -1, atomic: atomicOf(ctx)}
	if s, ok := ctx.Value(pinKey{}).(scope); ok && !tx.atomic {
		snap := r.p.router.Snapshot()
		shard, err := r.p.shardOfScope(s, snap)
		if err != nil {
			return nil, err
		}
		pl, err := snap.Placement(shard)
		if err != nil {
			return nil, err
		}
		if _, err := tx.pin(shard, pl, snap); err != nil {
			return nil, err
		}
	}
	return tx, nil
}

// GetDBConn is part of gorm.GetDBConnector: db.DB() still returns the
// default connection's *sql.DB.
func (r *rootPool) GetDBConn() (*sql.DB, error) {
	switch c := r.ConnPool.(type) {
	case *sql.DB:
		return c, nil
	case gorm.GetDBConnector:
		return c.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}
