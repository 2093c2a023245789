// Package metrics holds the photo service's Prometheus metrics: HTTP
// requests, statements per physical server (from a GORM callback pair), and
// the time writes waited on fenced shards during moves.
//
//	m := metrics.New(prometheus.NewRegistry())
//	if err := m.InstrumentGORM(db); err != nil { … }
//	http.Handle("/metrics", m.Handler())
package metrics

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the service's collectors, registered on one registry.
type Metrics struct {
	reg        *prometheus.Registry
	statements *prometheus.CounterVec
	stmtTime   *prometheus.HistogramVec
	stmtErrors *prometheus.CounterVec
	fenceWait  *prometheus.HistogramVec
	requests   *prometheus.CounterVec
	reqTime    *prometheus.HistogramVec
	fenceMax   atomic.Int64 // longest fence wait seen, ns
}

// New creates the collectors and registers them (and the Go and process
// collectors) on reg.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "photos_db_statements_total",
			Help: "SQL statements run, by physical server and kind (create, query, update, delete, row, raw).",
		}, []string{"server", "kind"}),
		stmtTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "photos_db_statement_seconds",
			Help:    "Latency of SQL statements, by physical server and kind.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"server", "kind"}),
		stmtErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "photos_db_statement_errors_total",
			Help: "SQL statements that failed, by physical server and kind.",
		}, []string{"server", "kind"}),
		fenceWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "photos_fenced_write_wait_seconds",
			Help:    "Time writes waited on a shard fenced for a move, by the shard's server before the move.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
		}, []string{"server"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "photos_http_requests_total",
			Help: "HTTP requests, by route pattern and status code.",
		}, []string{"route", "code"}),
		reqTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "photos_http_request_seconds",
			Help:    "HTTP request latency, by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	reg.MustRegister(m.statements, m.stmtTime, m.stmtErrors, m.fenceWait, m.requests, m.reqTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry the metrics are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveFenceWait records how long a write waited on a fenced shard.
func (m *Metrics) ObserveFenceWait(server string, d time.Duration) {
	m.fenceWait.WithLabelValues(server).Observe(d.Seconds())
	for {
		cur := m.fenceMax.Load()
		if int64(d) <= cur || m.fenceMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// MaxFenceWait is the longest wait ObserveFenceWait has seen.
func (m *Metrics) MaxFenceWait() time.Duration { return time.Duration(m.fenceMax.Load()) }

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Middleware counts and times requests by the route pattern that served
// them (r.Pattern, set by http.ServeMux).
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		m.reqTime.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// ProviderSet provides a fresh registry and the metrics on it.
var ProviderSet = wire.NewSet(NewRegistry, New)

// NewRegistry returns an empty Prometheus registry.
func NewRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
