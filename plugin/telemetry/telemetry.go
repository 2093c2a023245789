package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin"
)

// ErrNoPlugin reports a Telemetry used on a gorm.DB without the shardkit
// plugin: call db.Use(plugin.Register(…)) first, then db.Use(telemetry).
var ErrNoPlugin = errors.New("shardkit telemetry needs the shardkit plugin on the gorm.DB; db.Use the plugin first")

// DefaultMaxShardAttrs is the most shard numbers a span lists.
const DefaultMaxShardAttrs = 16

// Config configures Telemetry. The zero value works.
type Config struct {
	// TracerProvider makes the tracer of the statement spans. Nil means
	// otel.GetTracerProvider(), a no-op until the application installs
	// an SDK.
	TracerProvider trace.TracerProvider
	// Buckets are the statement latency histogram's upper bounds, in
	// seconds. Nil means DefaultBuckets.
	Buckets []float64
	// FenceBuckets are the fence wait histogram's, in seconds. Nil means
	// DefaultFenceBuckets.
	FenceBuckets []float64
	// MaxShardAttrs is the most shard numbers a span lists; a wider
	// statement gives only shardkit.fanout. Zero means
	// DefaultMaxShardAttrs.
	MaxShardAttrs int
}

// Telemetry observes the statements of one gorm.DB that uses the shardkit
// plugin. Install it with db.Use after the plugin, and register it on a
// Prometheus registry: it is a prometheus.Collector.
type Telemetry struct {
	cfg    Config
	tracer trace.Tracer
	p      *plugin.Plugin // set by Initialize
	m      *metrics
}

var _ gorm.Plugin = (*Telemetry)(nil)

// New returns the telemetry, ready for db.Use.
func New(cfg Config) *Telemetry {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Buckets == nil {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.FenceBuckets == nil {
		cfg.FenceBuckets = DefaultFenceBuckets
	}
	if cfg.MaxShardAttrs == 0 {
		cfg.MaxShardAttrs = DefaultMaxShardAttrs
	}
	return &Telemetry{
		cfg:    cfg,
		tracer: cfg.TracerProvider.Tracer("github.com/shardkit/shardkit/plugin/telemetry"),
		m:      newMetrics(cfg.Buckets, cfg.FenceBuckets),
	}
}

// Name is part of the gorm.Plugin interface.
func (t *Telemetry) Name() string { return "shardkit:telemetry" }

// Initialize is part of the gorm.Plugin interface: it finds the shardkit
// plugin on db, has it keep its routing decisions (plugin.Observe), and
// registers callbacks around each statement and after the plugin's route.
func (t *Telemetry) Initialize(db *gorm.DB) error {
	p, ok := db.Config.Plugins["shardkit"].(*plugin.Plugin)
	if !ok {
		return ErrNoPlugin
	}
	if t.p != nil && t.p != p {
		return fmt.Errorf("shardkit telemetry: already observing another gorm.DB's plugin; make one Telemetry per gorm.DB")
	}
	t.p = p
	cb := db.Callback()
	steps := []struct {
		name string
		err  error
	}{
		{"create start", cb.Create().Before("*").Register(startName, t.start)},
		{"create routed", cb.Create().After(routeName).Before("gorm:create").Register(routedName, t.routed)},
		{"create end", cb.Create().After("*").Register(endName, t.end(kindCreate))},
		{"query start", cb.Query().Before("*").Register(startName, t.start)},
		{"query routed", cb.Query().After(routeName).Before("gorm:query").Register(routedName, t.routed)},
		{"query end", cb.Query().After("*").Register(endName, t.end(kindQuery))},
		{"update start", cb.Update().Before("*").Register(startName, t.start)},
		{"update routed", cb.Update().After(routeName).Before("gorm:update").Register(routedName, t.routed)},
		{"update end", cb.Update().After("*").Register(endName, t.end(kindUpdate))},
		{"delete start", cb.Delete().Before("*").Register(startName, t.start)},
		{"delete routed", cb.Delete().After(routeName).Before("gorm:delete").Register(routedName, t.routed)},
		{"delete end", cb.Delete().After("*").Register(endName, t.end(kindDelete))},
		{"row start", cb.Row().Before("*").Register(startName, t.start)},
		{"row routed", cb.Row().After(routeName).Before("gorm:row").Register(routedName, t.routed)},
		{"row end", cb.Row().After("*").Register(endName, t.end(kindRow))},
		{"raw start", cb.Raw().Before("*").Register(startName, t.start)},
		{"raw routed", cb.Raw().After(routeName).Before("gorm:raw").Register(routedName, t.routed)},
		{"raw end", cb.Raw().After("*").Register(endName, t.end(kindRaw))},
	}
	for _, s := range steps {
		if s.err != nil {
			return fmt.Errorf("shardkit telemetry: register %s callback: %w", s.name, s.err)
		}
	}
	p.Observe()
	for _, s := range p.State().Servers {
		t.m.server(s.Name) // export every server's series from the start
	}
	return nil
}

// Callback names: the plugin's route, and the telemetry's own.
const (
	routeName  = "shardkit:route"
	startName  = "shardkit:telemetry_start"
	routedName = "shardkit:telemetry_routed"
	endName    = "shardkit:telemetry_end"
	stateKey   = "shardkit:telemetry"
)

// stmtState is what the telemetry keeps on a statement between its
// callbacks.
type stmtState struct {
	start  time.Time
	span   trace.Span      // nil until routed, and for a span not recording
	parent context.Context // the statement's context before the span's
}

// states recycles stmtStates: end puts back the one it took off its
// statement.
var states = sync.Pool{New: func() any { return new(stmtState) }}

func (t *Telemetry) start(db *gorm.DB) {
	st := states.Get().(*stmtState)
	st.start = time.Now()
	db.Statement.Settings.Store(stateKey, st)
}

// clientKind is made once: an option boxed per statement would allocate.
var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// routed starts the span of a statement the plugin routed, dated from the
// statement's start, and makes it the statement's context so that what
// runs the statement (the driver, fan-out) can nest under it.
func (t *Telemetry) routed(db *gorm.DB) {
	stmt := db.Statement
	v, ok := stmt.Settings.Load(stateKey)
	if !ok {
		return
	}
	st := v.(*stmtState)
	if _, ok := plugin.Routed(stmt); !ok || stmt.Context == nil {
		return
	}
	ctx, span := t.tracer.Start(stmt.Context, "shardkit", trace.WithTimestamp(st.start), clientKind)
	if !span.IsRecording() {
		return
	}
	st.span, st.parent = span, stmt.Context
	stmt.Context = ctx
}

// end records a statement's metrics and ends its span.
func (t *Telemetry) end(k kind) func(*gorm.DB) {
	return func(db *gorm.DB) {
		stmt := db.Statement
		v, ok := stmt.Settings.LoadAndDelete(stateKey)
		if !ok {
			return
		}
		st := v.(*stmtState)
		took := time.Since(st.start)
		info, routed := plugin.Routed(stmt)
		errType := ErrorType(db.Error)
		if routed || errType != "" && errType != TypeOther {
			t.m.observe(k, info, errType, errServer(db.Error), took)
		}
		if st.span != nil {
			t.finish(st.span, k, info, db.Error, errType)
			stmt.Context = st.parent
		}
		*st = stmtState{}
		states.Put(st)
	}
}

// Error types, the type label of shardkit_statement_errors_total and the
// shardkit.error_type span attribute.
const (
	TypeServerUnavailable = "server_unavailable" // plugin.ErrServerUnavailable
	TypeShardMoved        = "shard_moved"        // plugin.ErrShardMoved
	TypeFenceTimeout      = "fence_timeout"      // plugin.ErrShardFenced
	TypeServerLockSpace   = "server_lock_space"  // plugin.ErrServerLockSpace: raise the server's max_locks_per_transaction
	TypeRefused           = "refused"            // the plugin refused the statement
	TypeOther             = "other"
)

// ErrorType classifies a statement's error for metrics and spans: "" for
// none, and for gorm.ErrRecordNotFound (an answer, not a failure).
func ErrorType(err error) string {
	switch {
	case err == nil, errors.Is(err, gorm.ErrRecordNotFound):
		return ""
	case errors.Is(err, plugin.ErrServerUnavailable):
		return TypeServerUnavailable
	case errors.Is(err, plugin.ErrShardMoved):
		return TypeShardMoved
	case errors.Is(err, plugin.ErrShardFenced):
		return TypeFenceTimeout
	case errors.Is(err, plugin.ErrServerLockSpace):
		return TypeServerLockSpace
	case errors.Is(err, plugin.ErrMissingShardKey), errors.Is(err, plugin.ErrCrossShard),
		errors.Is(err, plugin.ErrUnroutableSQL), errors.Is(err, plugin.ErrIDShardMismatch),
		errors.Is(err, plugin.ErrShardKeyChange), errors.Is(err, plugin.ErrNotInitialized):
		return TypeRefused
	}
	return TypeOther
}

// errServer is the server an error names, or "".
func errServer(err error) string {
	if err == nil {
		return "" // before errors.As, whose targets escape
	}
	var se *plugin.ServerError
	if errors.As(err, &se) {
		return se.Server
	}
	var she *plugin.ShardError
	if errors.As(err, &she) {
		return she.Server
	}
	return ""
}
