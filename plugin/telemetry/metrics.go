package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
)

// DefaultBuckets are the statement latency histogram's upper bounds, in
// seconds: from a lookup by key (well under a millisecond) to a wide
// read or a statement that waited on its server.
var DefaultBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10}

// DefaultFenceBuckets are the fence wait histogram's, in seconds: a move's
// cutover holds writes for milliseconds to a few seconds
// (the plugin's Config.FenceWait is 2s by default).
var DefaultFenceBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5}

// noServer is the server label of a statement refused before it had one.
const noServer = "none"

type kind uint8

const (
	kindCreate kind = iota
	kindQuery
	kindUpdate
	kindDelete
	kindRow
	kindRaw
	nKinds
)

var kindNames = [nKinds]string{"create", "query", "update", "delete", "row", "raw"}

type shape uint8

const (
	shapeSingle shape = iota
	shapeMulti
	shapeNone
	nShapes
)

var shapeNames = [nShapes]string{"single", "multi", "none"}

var errTypes = []string{TypeServerUnavailable, TypeShardMoved, TypeFenceTimeout, TypeRefused, TypeOther}

func errIndex(t string) int {
	for i, s := range errTypes {
		if s == t {
			return i
		}
	}
	return len(errTypes) - 1
}

// metrics are the per-statement collectors, and each server's children
// of them resolved once (a label lookup per statement would cost more
// than the rest of the telemetry).
type metrics struct {
	statements *prometheus.CounterVec
	errors     *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	fenceWait  *prometheus.HistogramVec

	mu      sync.RWMutex
	servers map[string]*series
}

// series are one server's children.
type series struct {
	statements [nKinds][nShapes]prometheus.Counter // nil for shapes the server cannot have
	duration   [nKinds][nShapes]prometheus.Observer
	errors     [nKinds][]prometheus.Counter // by errTypes
	fenceWait  prometheus.Observer
}

func newMetrics(buckets, fenceBuckets []float64) *metrics {
	return &metrics{
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_statements_total",
			Help: "Statements on sharded tables, by physical server, kind (create, query, update, delete, row, raw) and shape (single shard, multi-shard, none: refused before routing). A multi-shard statement counts once per server it reached.",
		}, []string{"server", "kind", "shape"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_statement_errors_total",
			Help: "Failed statements on sharded tables, by physical server (the one the error names, else the statement's; none when unknown), kind and type (server_unavailable, shard_moved, fence_timeout, refused, other).",
		}, []string{"server", "kind", "type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_statement_duration_seconds",
			Help:    "Duration of statements on sharded tables (hooks and the statement's own transaction included), by physical server, kind and shape.",
			Buckets: buckets,
		}, []string{"server", "kind", "shape"}),
		fenceWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_fence_wait_seconds",
			Help:    "Time writes waited on a shard fenced for a move, by the shard's server.",
			Buckets: fenceBuckets,
		}, []string{"server"}),
		servers: map[string]*series{},
	}
}

// server returns a server's children, creating them (at zero) on first use.
func (m *metrics) server(name string) *series {
	m.mu.RLock()
	s := m.servers[name]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.servers[name]; s != nil {
		return s
	}
	s = &series{}
	shapes := []shape{shapeSingle, shapeMulti}
	if name == noServer {
		shapes = []shape{shapeNone}
	}
	for k := range nKinds {
		for _, sh := range shapes {
			s.statements[k][sh] = m.statements.WithLabelValues(name, kindNames[k], shapeNames[sh])
			if sh != shapeNone {
				s.duration[k][sh] = m.duration.WithLabelValues(name, kindNames[k], shapeNames[sh])
			}
		}
		for _, t := range errTypes {
			s.errors[k] = append(s.errors[k], m.errors.WithLabelValues(name, kindNames[k], t))
		}
	}
	if name != noServer {
		s.fenceWait = m.fenceWait.WithLabelValues(name)
	}
	m.servers[name] = s
	return s
}

// observe records one statement.
func (m *metrics) observe(k kind, info plugin.RouteInfo, errType, errServer string, took time.Duration) {
	sh := shapeSingle
	switch {
	case len(info.Servers) == 0 || errType == TypeRefused:
		sh = shapeNone // never sent
	case len(info.Shards) > 1:
		sh = shapeMulti
	}
	if sh == shapeNone {
		m.server(noServer).statements[k][shapeNone].Inc()
	} else {
		sec := took.Seconds()
		for _, name := range info.Servers {
			s := m.server(name)
			s.statements[k][sh].Inc()
			s.duration[k][sh].Observe(sec)
		}
	}
	if info.FenceWait > 0 {
		name := errServer
		if name == "" && len(info.Servers) > 0 {
			name = info.Servers[0]
		}
		if name != "" {
			m.server(name).fenceWait.Observe(info.FenceWait.Seconds())
		}
	}
	if errType == "" {
		return
	}
	name := errServer
	if name == "" && len(info.Servers) == 1 {
		name = info.Servers[0]
	}
	if name == "" {
		name = noServer
	}
	m.server(name).errors[k][errIndex(errType)].Inc()
}

// Scrape-time metrics, read from the plugin's state.
var (
	serverUpDesc = prometheus.NewDesc("shardkit_server_up",
		"1 while the plugin takes the physical server as up, 0 while as down after a failed connection (its statements fail at once until a retry finds it back).",
		[]string{"server"}, nil)
	mapVersionDesc = prometheus.NewDesc("shardkit_map_version",
		"Version of the shard map the router holds.", nil, nil)
	idSlotDesc = prometheus.NewDesc("shardkit_id_slot",
		"ID slot leased by this process's ID generator.", nil, nil)
	idLeaseValidDesc = prometheus.NewDesc("shardkit_id_lease_valid",
		"1 while the ID generator's slot lease is valid, 0 once it lapsed (catalog unreachable): new rows then take next_id().", nil, nil)
	idFallbackDesc = prometheus.NewDesc("shardkit_id_fallback",
		"1 while new rows take their ID from the database's next_id() (no ID source, or its lease lapsed), 0 while IDs are made in process.", nil, nil)
	idDatabaseRowsDesc = prometheus.NewDesc("shardkit_id_database_rows_total",
		"Rows whose ID came from the database's next_id().", nil, nil)
)

// Describe is part of the prometheus.Collector interface.
func (t *Telemetry) Describe(ch chan<- *prometheus.Desc) {
	t.m.statements.Describe(ch)
	t.m.errors.Describe(ch)
	t.m.duration.Describe(ch)
	t.m.fenceWait.Describe(ch)
	for _, d := range []*prometheus.Desc{serverUpDesc, mapVersionDesc, idSlotDesc, idLeaseValidDesc, idFallbackDesc, idDatabaseRowsDesc} {
		ch <- d
	}
}

// leased is an ID source that issues under a slot lease
// (*idgen.Generator).
type leased interface{ Lease() *idgen.Lease }

// Collect is part of the prometheus.Collector interface.
func (t *Telemetry) Collect(ch chan<- prometheus.Metric) {
	t.m.statements.Collect(ch)
	t.m.errors.Collect(ch)
	t.m.duration.Collect(ch)
	t.m.fenceWait.Collect(ch)
	if t.p == nil {
		return // not initialized yet
	}
	st := t.p.State()
	for _, s := range st.Servers {
		ch <- prometheus.MustNewConstMetric(serverUpDesc, prometheus.GaugeValue, b2f(s.Up), s.Name)
	}
	ch <- prometheus.MustNewConstMetric(mapVersionDesc, prometheus.GaugeValue, float64(st.Version))
	fallback := st.IDs == nil
	if g, ok := st.IDs.(leased); ok {
		if l := g.Lease(); l != nil {
			valid := l.Valid(time.Now())
			ch <- prometheus.MustNewConstMetric(idSlotDesc, prometheus.GaugeValue, float64(l.Slot))
			ch <- prometheus.MustNewConstMetric(idLeaseValidDesc, prometheus.GaugeValue, b2f(valid))
			fallback = !valid
		}
	}
	ch <- prometheus.MustNewConstMetric(idFallbackDesc, prometheus.GaugeValue, b2f(fallback))
	ch <- prometheus.MustNewConstMetric(idDatabaseRowsDesc, prometheus.CounterValue, float64(st.DatabaseIDs))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
