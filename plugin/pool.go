package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// serverDB is one physical server's primary pool. Its own type lets the
// route callback tell a pool it set from one the caller chose.
type serverDB struct {
	*sql.DB
	name      string
	opened    router.Server   // the map's entry it was opened with (see sameDSNs)
	downUntil atomic.Int64    // unix ns until which the server is taken as down; 0: up
	takenDown atomic.Int64    // times taken as down
	replicas  []gorm.ConnPool // replica pools, possibly none
	// named and namedReplicas: reads across shards run as named prepared
	// statements on the primary's pool, on the replicas' (PreparedReads)
	named, namedReplicas bool
	// unnamed: the primary's connections are the plugin's own
	// (unnamedConn), which bound a one-shard statement themselves
	// (stmtOpts)
	unnamed bool
	repDBs  []*sql.DB
	// privileged is what checkRole found: 0 not known yet, 1 an
	// application role, 2 a role no revoke refuses.
	privileged atomic.Int32
}

// sqlPrivileged asks whether the session's role is one that privileges
// do not bind: a superuser, or a member of the owner of a shard schema.
// The old home of a moved shard refuses a stale router's reads by
// revoking the application role's privileges there (docs/moves.md), which
// such a role ignores.
const sqlPrivileged = `SELECT r.rolsuper OR EXISTS (SELECT 1 FROM pg_namespace n
    WHERE n.nspname ~ '^shard_[0-9]+$' AND pg_has_role(n.nspowner, 'MEMBER'))
FROM pg_roles r WHERE r.rolname = current_user`

// checkRole finds out, once, whether the server's pool connects as a
// role privileges do not bind, and warns if so: reads on a stale map are
// then not refused by a moved shard's old home. A server it cannot reach
// stays unknown.
func (s *serverDB) checkRole(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var privileged bool
	if err := s.DB.QueryRowContext(ctx, sqlPrivileged).Scan(&privileged); err != nil {
		return
	}
	if !privileged {
		s.privileged.Store(1)
		return
	}
	s.privileged.Store(2)
	if log == nil {
		log = slog.Default()
	}
	log.Warn("shardkit: the server's DSN connects as a superuser or a shard schema's owner: reads on a stale shard map are not refused by a moved shard's old home; connect as a member of the application role (docs/security.md)",
		"server", s.name)
}

// pools opens one pool per physical server on first use and keeps it
// while the shard map gives the server the same DSNs.
type pools struct {
	cfg *Config
	mu  sync.RWMutex
	by  map[string]*serverDB
	// stale is called when a connection is refused as not the recorded
	// primary (Plugin.reloadSoon); nil in tests that build pools alone.
	stale func()
}

// sameDSNs reports whether the pools of s were opened with what the map
// now gives the server: a map version that changes a server's DSN (a
// password rotated, a pooler put in front), its replicas or its recorded
// primary gets new pools. It runs on every statement, and allocates
// nothing.
func (s *serverDB) sameDSNs(srv router.Server) bool {
	return s.opened.DSN == srv.DSN && slices.Equal(s.opened.Replicas, srv.Replicas) && s.opened.Primary == srv.Primary
}

func (ps *pools) get(snap *router.Snapshot, name string) (*serverDB, error) {
	srv, inMap := snap.Server(name)
	ps.mu.RLock()
	s, ok := ps.by[name]
	ps.mu.RUnlock()
	if ok && (!inMap || s.sameDSNs(srv)) {
		return s, nil
	}
	if !inMap {
		return nil, fmt.Errorf("%w: %q", router.ErrUnknownServer, name)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	old, ok := ps.by[name]
	if ok && old.sameDSNs(srv) {
		return old, nil
	}
	s, err := ps.openServer(name, srv)
	if err != nil {
		return nil, err
	}
	if ps.by == nil {
		ps.by = map[string]*serverDB{}
	}
	ps.by[name] = s
	if old != nil {
		// Statements and transactions still on the old pools finish
		// there: Close waits for them, away from this statement.
		go old.close()
	}
	return s, nil
}

// openServer opens the pools of a server: its primary and each replica.
func (ps *pools) openServer(name string, srv router.Server) (*serverDB, error) {
	primary, unnamed, err := ps.open(name, srv.DSN, srv.Primary)
	if err != nil {
		return nil, fmt.Errorf("shardkit: open server %s: %w", name, err)
	}
	s := &serverDB{DB: primary, name: name, opened: router.Server{DSN: srv.DSN, Replicas: slices.Clone(srv.Replicas), Primary: srv.Primary}, named: ps.cfg.namedReads(srv, srv.DSN, false), namedReplicas: len(srv.Replicas) > 0, unnamed: unnamed}
	go s.checkRole(ps.cfg.Logger)
	for _, dsn := range srv.Replicas {
		r, _, err := ps.open(name, dsn, router.Primary{}) // a replica is a standby
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("shardkit: open a replica of server %s: %w", name, err)
		}
		s.namedReplicas = s.namedReplicas && ps.cfg.namedReads(srv, dsn, true)
		s.replicas = append(s.replicas, r)
		s.repDBs = append(s.repDBs, r)
	}
	return s, nil
}

// close closes the server's pools.
func (s *serverDB) close() error {
	errs := []error{s.DB.Close()}
	for _, r := range s.repDBs {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// open opens a pool of the named server (its primary or a replica),
// whose connections go only to the host that is rec, the server's
// recorded primary (zero for a replica, a standby), and reports whether
// its connections are unnamedConns. A pool that Config.OpenDB opens is
// the caller's own and is not fenced.
func (ps *pools) open(server, dsn string, rec router.Primary) (*sql.DB, bool, error) {
	var db *sql.DB
	unnamed := false
	if ps.cfg.OpenDB != nil {
		var err error
		if db, err = ps.cfg.OpenDB(dsn); err != nil {
			return nil, false, err
		}
	} else {
		c, err := newFencedConnector(ps.cfg, server, dsn, rec)
		if err != nil {
			return nil, false, err
		}
		c.notPrimary = ps.stale
		db, unnamed = sql.OpenDB(c), !c.named
	}
	db.SetMaxOpenConns(max(ps.cfg.MaxOpenConns, 0))
	db.SetMaxIdleConns(max(ps.cfg.MaxIdleConns, 0))
	db.SetConnMaxIdleTime(max(ps.cfg.ConnMaxIdleTime, 0))
	return db, unnamed, nil
}

func (ps *pools) close() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var errs []error
	for _, s := range ps.by {
		errs = append(errs, s.close())
	}
	ps.by = nil
	return errors.Join(errs...)
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
		if pl.State == router.StateFenced {
			// A transaction begun on a fenced shard's server would be
			// refused its writes there once the fence ends: it waits, as
			// a write does, and begins on the shard's home after it.
			start := time.Now()
			if snap, pl, err = r.p.waitFence(ctx, shard); err != nil {
				return nil, err
			}
			tx.fenceWait = time.Since(start)
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
