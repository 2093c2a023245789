package plugin

import (
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// Observe makes the plugin keep each sharded statement's routing decision
// on the statement, for callbacks that run after its route to read with
// Routed (metrics, tracing). Until Observe is called the plugin keeps
// nothing and Routed reports false: routing costs nothing extra. Observe
// is meant for set-up (plugin/telemetry calls it), but is safe at any time.
func (p *Plugin) Observe() { p.observed.Store(true) }

// RouteInfo is where the plugin routed a statement on a sharded table.
type RouteInfo struct {
	// Table is the sharded table (unqualified), or the statement's table
	// when it was refused before its model was known.
	Table string
	// Shards are the logical shards the statement was routed to, in plan
	// order; empty when it was refused before they were known. Shared
	// with the plugin: do not modify.
	Shards []int
	// Servers are the physical servers of those shards, each once, in
	// plan order; empty when the statement was refused before it had one.
	Servers []string
	// Version is the shard map version the decision was read from (after
	// any fence wait), 0 when refused before the map was read.
	Version int64
	// FenceWait is how long a write waited for fenced shards to be
	// released by their move, 0 for no wait.
	FenceWait time.Duration
}

// routeRecord is a decision as kept for Routed: only what it reads.
type routeRecord struct {
	table   string
	shards  []int
	places  []router.Placement // nil for one shard
	one     router.Placement
	oneIdx  [1]int    // backing array of shards for one shard
	oneSrv  [1]string // backing array of Routed's Servers for one shard
	version int64
	fenced  time.Duration
}

// record keeps a decision on the statement (only when observed: it
// allocates).
func record(stmt *gorm.Statement, d *decision) {
	r := &routeRecord{table: stmt.Table, shards: d.shards, places: d.places, one: d.one, fenced: d.fenced}
	if d.m != nil {
		r.table = d.m.table
	}
	if d.snap != nil {
		r.version = d.snap.Version
		if len(d.shards) == 1 && r.one.Server == "" {
			r.one, _ = d.snap.Placement(d.shards[0]) // refused before placement
		}
	}
	stmt.Settings.Store(routedKey, r)
}

// recordRaw keeps the routing of raw SQL on a sharded table: the pinned
// transaction's shard, or a refusal.
func (p *Plugin) recordRaw(db *gorm.DB) {
	stmt := db.Statement
	if v, ok := stmt.ConnPool.(*txView); ok {
		shard, server := v.t.pinned()
		if shard < 0 {
			return
		}
		r := &routeRecord{table: p.mentions(stmt.SQL.String()), one: router.Placement{Shard: shard, Server: server}}
		r.oneIdx[0] = shard
		r.shards = r.oneIdx[:]
		if snap := p.router.Snapshot(); snap != nil {
			r.version = snap.Version
		}
		stmt.Settings.Store(routedKey, r)
		return
	}
	if db.Error != nil {
		stmt.Settings.Store(routedKey, &routeRecord{table: p.mentions(stmt.SQL.String())})
	}
}

// Routed returns the routing decision of a statement on a sharded table,
// for callbacks placed after the plugin's shardkit:route (or after the
// statement ran). It reports false when the plugin does not Observe, and
// for a statement on an unsharded table (left on the default connection)
// or one that failed before its route (a hook's error, a missing shard
// key on Create).
func Routed(stmt *gorm.Statement) (RouteInfo, bool) {
	v, ok := stmt.Settings.Load(routedKey)
	if !ok {
		return RouteInfo{}, false
	}
	r, ok := v.(*routeRecord)
	if !ok {
		return RouteInfo{}, false
	}
	info := RouteInfo{Table: r.table, Shards: r.shards, Version: r.version, FenceWait: r.fenced}
	switch {
	case r.places != nil:
		for _, pl := range r.places {
			if !slices.Contains(info.Servers, pl.Server) {
				info.Servers = append(info.Servers, pl.Server)
			}
		}
	case len(r.shards) == 1:
		// A write retried on a moved shard's new home runs there: the
		// statement's connection names it while the statement holds it.
		s := serverOf(stmt.ConnPool)
		if s == "" {
			s = r.one.Server
		}
		if s != "" {
			r.oneSrv[0] = s
			info.Servers = r.oneSrv[:]
		}
	}
	return info, true
}

// State is the plugin's view of its servers and ID source, for metrics
// and health checks: the one health view (Plugin.State).
type State struct {
	// Version is the version of the shard map the router holds.
	Version int64
	// Servers are the physical servers of that map, by name.
	Servers []ServerState
	// IDs is the plugin's ID source (Config.IDs), nil when every new row
	// takes its ID from the database's next_id().
	IDs IDSource
	// DatabaseIDs counts the rows, since Register, whose ID came from the
	// database's next_id() (no ID source, no slot, or a lapsed lease).
	DatabaseIDs int64
}

// ServerState is one physical server as the plugin sees it.
type ServerState struct {
	Name string
	// Up is false while the server is taken as down after a failed
	// connection (see Config.ServerRetry): its statements fail at once
	// with ErrServerUnavailable until one finds it back.
	Up bool
	// TakenDown counts the times the server was taken as down since its
	// pool opened (zero while no pool is open). A server slow to answer
	// or to start sessions is not taken as down (see
	// Config.ConnectTimeout): a count that grows under load alone says
	// that something else is wrong.
	TakenDown int64
	// Privileged: the pool connects as a superuser or a shard schema's
	// owner, which the old home of a moved shard cannot refuse: reads on
	// a stale map may then see a value older than one acknowledged
	// (docs/moves.md). false also while not known yet.
	Privileged bool
}

// State returns the plugin's current state: the shard map's version, each
// server of that map by name (up or taken as down, how often it was, and
// whether its pool connects with privileges), and where IDs come from.
// It reads memory only.
func (p *Plugin) State() State {
	if p.router == nil {
		return State{IDs: p.cfg.IDs}
	}
	snap := p.router.Snapshot()
	st := State{Version: snap.Version, IDs: p.cfg.IDs, DatabaseIDs: p.dbIDs.Load()}
	for _, srv := range snap.Servers() {
		s := ServerState{Name: srv.Name, Up: true}
		p.pools.mu.RLock()
		db := p.pools.by[srv.Name]
		p.pools.mu.RUnlock()
		if db != nil {
			s.Up = db.downUntil.Load() == 0
			s.TakenDown = db.takenDown.Load()
			s.Privileged = db.privileged.Load() == 2
		}
		st.Servers = append(st.Servers, s)
	}
	return st
}
