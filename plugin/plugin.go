package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// Plugin is the shardkit GORM plugin. Create it with Register and install
// it with db.Use.
type Plugin struct {
	cfg     Config
	router  ShardMap
	models  []any
	byTable map[string]*model // read-only after Initialize
	pools   *pools
	lookups *lookupPools // pools for lookup tables' statements
	root    *rootPool
	orig    originals
	coll    collations // text collations per server (collation.go)

	observed  atomic.Bool  // keep routing decisions for Routed (see Observe)
	reloading atomic.Bool  // a reload of reloadSoon is under way
	dbIDs     atomic.Int64 // rows whose ID came from the database's next_id()
	atomics   atomicCounters
	log       logger.Interface          // the gorm.DB's, for what happens after a commit returns
	unions    unionTexts                // texts of recent reads across shards' statements (read_render_union.go)
	every     atomic.Pointer[placedAll] // the last snapshot's shards, placed, for reads of every shard (decide.go)
	cutRows   atomic.Int64              // rows of reads across shards dropped as they arrived (pageCut); tests read it

	// unionBatch is the most shards one statement of a multi-shard read
	// covers; 0: the package's unionBatch. Tests and benchmarks set it
	// (1: one statement per shard) to compare the ways of reading.
	unionBatch int
	// running, when set, is called by the goroutine that runs a statement
	// of a multi-shard read, before it runs: tests see what the servers
	// get (it must be safe for concurrent use).
	running func(*readStmt)
}

// originals are GORM's own callbacks that the plugin wraps.
type originals struct {
	begin, create, query, update, delete, row func(*gorm.DB)
	finish                                    func(*gorm.DB) // gorm:commit_or_rollback_transaction, nil if GORM has none
}

var _ gorm.Plugin = (*Plugin)(nil)

// Register returns a plugin that routes the given models (pointers to
// structs, e.g. &Photo{}) by their shard tags. Each model has exactly one
// field tagged shard:"key" (the shard key: an integer, key mod shards, or
// a string, router.HashString(key) mod shards) or shard:"id" (another
// sharded ID: the row lives in that ID's shard), and one 64-bit integer
// primary key. Tables of other models pass through untouched.
func Register(cfg Config, models ...any) *Plugin {
	cfg = cfg.withDefaults()
	ps := &pools{cfg: &cfg}
	p := &Plugin{cfg: cfg, router: cfg.Router, models: models, pools: ps, lookups: &lookupPools{ps: ps}}
	ps.stale = p.reloadSoon
	return p
}

// reloadSoon reloads the map in the background, one reload at a time. A
// server's pools are opened for the primary the map records (router.Fence);
// a connection refused with ErrNotPrimary means the map may be older than
// the record of a failover, which a router that does not watch the map
// learns of only so: the reloaded map names the new primary, and its
// server gets new pools (serverDB.sameDSNs) on its next statement.
func (p *Plugin) reloadSoon() {
	if p.router == nil || !p.reloading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.reloading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
		defer cancel()
		_, _ = p.router.Reload(ctx)
	}()
}

// reloadTimeout bounds a reload of reloadSoon.
const reloadTimeout = 5 * time.Second

// Name is part of the gorm.Plugin interface.
func (p *Plugin) Name() string { return "shardkit" }

// Initialize is part of the gorm.Plugin interface: it parses the models,
// opens a pool per physical server, wraps the default connection so that
// transactions open on the right server, and installs the callbacks.
//
// If Initialize fails, every statement on db fails with an error wrapping
// ErrNotInitialized and the cause, so that a db.Use whose error was
// ignored cannot send sharded statements to the default connection.
func (p *Plugin) Initialize(db *gorm.DB) (err error) {
	defer func() {
		if err != nil {
			poison(db, err)
		}
	}()
	if r, ok := p.router.(*router.Router); p.router == nil || ok && r == nil {
		return fmt.Errorf("%w: plugin.Config.Router is nil; create one with router.New", ErrInvalidConfig)
	}
	if p.cfg.WarmUp < WarmUpOff || p.cfg.WarmUp > WarmUpBackground {
		return fmt.Errorf("%w: plugin.Config.WarmUp is %v; use WarmUpOff, WarmUpBlocking or WarmUpBackground", ErrInvalidConfig, p.cfg.WarmUp)
	}
	snap := p.router.Snapshot()
	p.byTable = make(map[string]*model, len(p.models))
	for _, v := range p.models {
		m, err := parseModel(db, v, snap.Shards)
		if err != nil {
			return err
		}
		m.p = p
		p.byTable[m.table] = m
	}
	for _, srv := range snap.Servers() {
		if _, err := p.pools.get(snap, srv.Name); err != nil {
			return err
		}
	}
	if !p.cfg.SkipTableCheck {
		if err := p.checkTables(db.Statement.Context, snap); err != nil {
			return err
		}
	}
	p.readCollations(db.Statement.Context, snap)
	if p.cfg.WarmUp != WarmUpOff {
		p.warmUp(db.Statement.Context, snap)
	}
	p.log = db.Logger
	p.root = &rootPool{ConnPool: db.ConnPool, p: p}
	if ps, ok := db.ConnPool.(*gorm.PreparedStmtDB); ok {
		// gorm.Config{PrepareStmt: true}: the plugin goes beneath GORM's
		// statement manager, so db.ConnPool stays the *gorm.PreparedStmtDB
		// that code written for plain GORM finds there.
		p.root.ConnPool = ps.ConnPool
		ps.ConnPool = p.root
	} else {
		db.ConnPool = p.root
		db.Statement.ConnPool = p.root
	}
	return p.registerCallbacks(db)
}

// Close closes the pools of the physical servers. The default connection
// belongs to the caller.
func (p *Plugin) Close() error { return errors.Join(p.pools.close(), p.lookups.close()) }

// lookup returns the registered model of a statement's table, and the
// shard named by a schema-qualified table ("shard_0042.photos"), or -1.
func (p *Plugin) lookup(stmt *gorm.Statement) (*model, int, error) {
	if m, ok := p.byTable[stmt.Table]; ok {
		if te := stmt.TableExpr; te != nil {
			if s, ok := m.shardOfExpr(te); ok {
				return m, s, nil // routed before: the shard's table expression
			}
		}
		return m, -1, nil
	}
	if strings.HasPrefix(stmt.Table, "shard_") {
		if i := strings.IndexByte(stmt.Table, '.'); i > 0 {
			if m, ok := p.byTable[stmt.Table[i+1:]]; ok {
				shard, err := router.ParseSchemaName(stmt.Table[:i])
				if err != nil {
					return nil, -1, fmt.Errorf("%w: table %q: %w", ErrUnroutableSQL, stmt.Table, err)
				}
				return m, shard, nil
			}
		}
	}
	if stmt.Schema != nil && stmt.Table != "" {
		if m, ok := p.byTable[stmt.Schema.Table]; ok {
			return nil, -1, fmt.Errorf("%w: table %q for sharded model %s; leave the table name to the plugin", ErrUnroutableSQL, stmt.Table, m.schema.Name)
		}
	}
	return nil, -1, nil
}

// RoutedShard returns the logical shard a statement was routed to, for
// callbacks that run after the plugin's route (metrics, tracing, logging):
// the shard whose schema-qualified table the statement names. It reports
// false for a statement on an unsharded table, one not yet routed, and a
// multi-shard statement (whose shards are run one by one).
func RoutedShard(stmt *gorm.Statement) (int, bool) {
	name := stmt.Table
	if stmt.TableExpr != nil {
		name = stmt.TableExpr.SQL
	}
	schema, _, ok := strings.Cut(name, ".")
	if !ok {
		return 0, false
	}
	s, err := router.ParseSchemaName(strings.Trim(schema, `"`))
	return s, err == nil
}

// shardOfScope returns the shard a Shard or ShardOfID scope names.
func (p *Plugin) shardOfScope(s scope, snap *router.Snapshot) (int, error) {
	switch s.kind {
	case scopeID:
		return shardOfID(s.id, snap)
	case scopeKey:
		if k, ok := s.key.(string); ok {
			return router.ShardOfString(k, snap.Shards)
		}
		return shardOfValue(keyInt, s.key, snap)
	}
	return 0, fmt.Errorf("%w: AllShards cannot pin a transaction", ErrUnroutableSQL)
}

func defaultNoSlot(err error) bool {
	return errors.Is(err, idgen.ErrNoFreeSlot) || errors.Is(err, idgen.ErrLeaseLost) || errors.Is(err, idgen.ErrLeaseExpired)
}
