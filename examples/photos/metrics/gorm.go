package metrics

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// Statement settings the callbacks keep between the two halves of a pair.
const (
	startKey = "photos:metrics_start"
	fenceKey = "photos:metrics_fence"
)

// routeCallback is the shardkit plugin's routing callback, which holds
// writes to fenced shards.
const routeCallback = "shardkit:route"

type fenceStart struct {
	at   time.Time
	snap *router.Snapshot
}

// InstrumentGORM registers callback pairs on db, which must already use the
// shardkit plugin:
//
//   - around each of GORM's processors (create, query, update, delete, row,
//     raw): statement counts, errors and latencies by physical server (read
//     from the schema-qualified table the plugin routed to; "multi" for a
//     statement spread over several shards);
//   - around the plugin's routing step of writes: the time a write waited
//     because its shard was fenced for a move.
func (m *Metrics) InstrumentGORM(db *gorm.DB, rt *router.Router) error {
	cb := db.Callback()
	regs := []struct {
		name string
		err  error
	}{
		{"create start", cb.Create().Before("*").Register("photos:metrics_start", start)},
		{"create end", cb.Create().After("*").Register("photos:metrics_end", m.end("create", rt))},
		{"query start", cb.Query().Before("*").Register("photos:metrics_start", start)},
		{"query end", cb.Query().After("*").Register("photos:metrics_end", m.end("query", rt))},
		{"update start", cb.Update().Before("*").Register("photos:metrics_start", start)},
		{"update end", cb.Update().After("*").Register("photos:metrics_end", m.end("update", rt))},
		{"delete start", cb.Delete().Before("*").Register("photos:metrics_start", start)},
		{"delete end", cb.Delete().After("*").Register("photos:metrics_end", m.end("delete", rt))},
		{"row start", cb.Row().Before("*").Register("photos:metrics_start", start)},
		{"row end", cb.Row().After("*").Register("photos:metrics_end", m.end("row", rt))},
		{"raw start", cb.Raw().Before("*").Register("photos:metrics_start", start)},
		{"raw end", cb.Raw().After("*").Register("photos:metrics_end", m.end("raw", rt))},
		{"create fence start", cb.Create().Before(routeCallback).Register("photos:fence_start", fenceBegin(rt))},
		{"create fence end", cb.Create().After(routeCallback).Register("photos:fence_end", m.fenceEnd)},
		{"update fence start", cb.Update().Before(routeCallback).Register("photos:fence_start", fenceBegin(rt))},
		{"update fence end", cb.Update().After(routeCallback).Register("photos:fence_end", m.fenceEnd)},
		{"delete fence start", cb.Delete().Before(routeCallback).Register("photos:fence_start", fenceBegin(rt))},
		{"delete fence end", cb.Delete().After(routeCallback).Register("photos:fence_end", m.fenceEnd)},
	}
	for _, r := range regs {
		if r.err != nil {
			return fmt.Errorf("photos: register the %s metrics callback: %w", r.name, r.err)
		}
	}
	// Export the fence-wait histograms at zero from the start, so that
	// dashboards see them before the first move.
	for _, s := range rt.Snapshot().Servers() {
		m.fenceWait.WithLabelValues(s.Name)
	}
	return nil
}

func start(db *gorm.DB) {
	db.Statement.Settings.Store(startKey, time.Now())
}

// serverOf names the server a routed statement ran on: "multi" for one
// spread over several shards, "default" for an unrouted one.
func serverOf(stmt *gorm.Statement, snap *router.Snapshot) string {
	if shard, ok := plugin.RoutedShard(stmt); ok {
		if p, err := snap.Placement(shard); err == nil {
			return p.Server
		}
	}
	if _, ok := stmt.Clauses["shardkit:fanout"]; ok {
		return "multi"
	}
	return "default"
}

func (m *Metrics) end(kind string, rt *router.Router) func(*gorm.DB) {
	return func(db *gorm.DB) {
		v, ok := db.Statement.Settings.Load(startKey)
		if !ok {
			return
		}
		t, _ := v.(time.Time)
		server := serverOf(db.Statement, rt.Snapshot())
		m.statements.WithLabelValues(server, kind).Inc()
		m.stmtTime.WithLabelValues(server, kind).Observe(time.Since(t).Seconds())
		if db.Error != nil {
			m.stmtErrors.WithLabelValues(server, kind).Inc()
		}
	}
}

func fenceBegin(rt *router.Router) func(*gorm.DB) {
	return func(db *gorm.DB) {
		db.Statement.Settings.Store(fenceKey, fenceStart{at: time.Now(), snap: rt.Snapshot()})
	}
}

// fenceEnd observes the routing time of a write whose shard was fenced in
// the map the plugin routed with: that time is the plugin's fence wait.
func (m *Metrics) fenceEnd(db *gorm.DB) {
	v, ok := db.Statement.Settings.Load(fenceKey)
	if !ok {
		return
	}
	fs, _ := v.(fenceStart)
	shard, ok := plugin.RoutedShard(db.Statement)
	if !ok || fs.snap == nil {
		return
	}
	p, err := fs.snap.Placement(shard)
	if err != nil || p.State != router.StateFenced {
		return
	}
	m.ObserveFenceWait(p.Server, time.Since(fs.at))
}
