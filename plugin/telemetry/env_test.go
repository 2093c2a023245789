package telemetry

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// env is a catalog, shard servers a and b, a router, an ID generator, a
// gorm.DB with the plugin and the telemetry, a registry holding it, and
// an in-memory span recorder.
type env struct {
	cat    *catalog.Catalog
	r      *router.Router
	gen    *idgen.Generator
	db     *gorm.DB
	p      *plugin.Plugin
	tel    *Telemetry
	reg    *prometheus.Registry
	spans  *tracetest.SpanRecorder
	cfg    plugin.Config
	shards int
}

type envOpts struct {
	dsnB string // server b's database; "" for one on cluster 1
	cfg  func(*plugin.Config)
}

const testShards = 16

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{shards: testShards}
	se := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: testShards,
		DSN: func(server string) string {
			if server == "b" {
				return o.dsnB // "" for one on cluster 1
			}
			return ""
		}})
	e.cat = se.Catalog
	e.r = se.Router(t)
	e.gen = se.Generator(t)
	e.cfg = plugin.Config{Router: e.r, IDs: e.gen}
	if o.cfg != nil {
		o.cfg(&e.cfg)
	}
	e.spans = tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e.tel = New(Config{TracerProvider: tp})
	e.db, e.p = e.open(t, e.cfg, e.tel)
	e.reg = prometheus.NewRegistry()
	e.reg.MustRegister(e.tel)
	return e
}

// open opens a gorm.DB on an empty default database with its own plugin
// of cfg, and tel (when not nil).
func (e *env) open(t testing.TB, cfg plugin.Config, tel *Telemetry) (*gorm.DB, *plugin.Plugin) {
	t.Helper()
	db, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 1)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	p := plugin.Register(cfg, &photos.Photo{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if tel != nil {
		if err := db.Use(tel); err != nil {
			t.Fatal(err)
		}
	}
	return db, p
}

// shardOf is the shard of a user key.
func (e *env) shardOf(user int64) int { return int(user % int64(e.shards)) }

// serverOf names the server of a shard in the current map.
func (e *env) serverOf(t testing.TB, shard int) string {
	t.Helper()
	return shardtest.ServerOf(t, e.r, shard)
}

// userOn returns a user whose shard is on server.
func (e *env) userOn(t testing.TB, server string) int64 {
	t.Helper()
	return shardtest.UserOn(t, e.r, e.shards, server, 1)
}

// setShard changes one shard's row of the map in the catalog.
func (e *env) setShard(t *testing.T, shard int, server string, state router.ShardState) {
	t.Helper()
	shardtest.PlaceShard(t, e.cat, shard, server, state)
}

// find returns the metric with the name and exactly these labels, or nil
// when it is not exported.
func (e *env) find(t testing.TB, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if sameLabels(m.GetLabel(), labels) {
				return m
			}
		}
	}
	return nil
}

// metric returns the value of the metric with the name and exactly these
// labels (a counter's or gauge's value, a histogram's sample count), and
// whether it is exported.
func (e *env) metric(t testing.TB, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	m := e.find(t, name, labels)
	switch {
	case m == nil:
	case m.Counter != nil:
		return m.GetCounter().GetValue(), true
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), true
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount()), true
	}
	return 0, false
}

// value is metric for one that must be exported.
func (e *env) value(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := e.metric(t, name, labels)
	if !ok {
		t.Fatalf("metric %s%v not exported", name, labels)
	}
	return v
}

// histogramSum is the sum of a histogram's samples.
func (e *env) histogramSum(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	m := e.find(t, name, labels)
	if m == nil || m.Histogram == nil {
		t.Fatalf("histogram %s%v not exported", name, labels)
	}
	return m.GetHistogram().GetSampleSum()
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// lbl builds a label set from name, value pairs.
func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
