// Package metrics holds the photo service's Prometheus metrics: HTTP
// requests, and the shardkit telemetry (plugin/telemetry: statements,
// errors and latencies per physical server, fence waits, server health,
// map version, ID slot lease; spans per routed statement), and the atomic
// transactions the resolver has left in doubt.
//
//	m := metrics.New(prometheus.NewRegistry())
//	if err := m.InstrumentGORM(db); err != nil { … }
//	http.Handle("/metrics", m.Handler())
package metrics

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shardkit/shardkit/plugin/telemetry"
	"github.com/shardkit/shardkit/resolver"
)

// Metrics are the service's collectors, registered on one registry.
type Metrics struct {
	reg      *prometheus.Registry
	tel      *telemetry.Telemetry
	requests *prometheus.CounterVec
	reqTime  *prometheus.HistogramVec
	fenceMax atomic.Int64 // longest fence wait seen, ns
}

// New creates the collectors and registers them (the shardkit telemetry,
// the Go and process collectors) on reg. The telemetry observes nothing
// until InstrumentGORM.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		tel: telemetry.New(telemetry.Config{}),
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
	reg.MustRegister(m.tel, m.requests, m.reqTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry the metrics are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// MaxFenceWait is the longest time a write waited on a fenced shard.
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

// WatchInDoubt exports the resolver's last pass: the atomic transactions
// left in doubt (prepared on some server, not yet finished) and the age of
// the oldest, for an alert on a resolver that cannot finish them.
func (m *Metrics) WatchInDoubt(last func() resolver.Report) error {
	count := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardkit_atomic_in_doubt",
		Help: "Parts of atomic transactions left prepared at the resolver's last pass.",
	}, func() float64 { return float64(len(last().InDoubt)) })
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardkit_atomic_in_doubt_oldest_seconds",
		Help: "Age of the oldest part of an atomic transaction left prepared at the resolver's last pass; 0 when none.",
	}, func() float64 { return last().Oldest().Seconds() })
	for _, c := range []prometheus.Collector{count, oldest} {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("photos: register the in-doubt metrics: %w", err)
		}
	}
	return nil
}
