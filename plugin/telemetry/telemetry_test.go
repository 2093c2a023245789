package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

func TestErrorType(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"none", nil, ""},
		{"record not found", fmt.Errorf("x: %w", gorm.ErrRecordNotFound), ""},
		{"server unavailable", &plugin.ServerError{Server: "b", Err: errors.New("refused")}, TypeServerUnavailable},
		{"shard moved", &plugin.ShardError{Shard: 1, Err: fmt.Errorf("%w: fence", plugin.ErrShardMoved)}, TypeShardMoved},
		{"fenced", &plugin.ShardError{Shard: 1, Err: plugin.ErrShardFenced}, TypeFenceTimeout},
		{"missing key", &plugin.ShardError{Shard: -1, Err: plugin.ErrMissingShardKey}, TypeRefused},
		{"unroutable", plugin.ErrUnroutableSQL, TypeRefused},
		{"cross shard", plugin.ErrCrossShard, TypeRefused},
		{"lock space", fmt.Errorf("shardkit: server a: a statement reading 100 shards of photos: %w: %w", plugin.ErrServerLockSpace,
			&pgconn.PgError{Code: "53200", Message: "out of shared memory", Hint: "You might need to increase max_locks_per_transaction."}), TypeServerLockSpace},
		{"out of shared memory, no hint", &pgconn.PgError{Code: "53200", Message: "out of shared memory"}, TypeOther},
		{"other", errors.New("duplicate key"), TypeOther},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ErrorType(c.err); got != c.want {
				t.Fatalf("ErrorType(%v) = %q, want %q", c.err, got, c.want)
			}
		})
	}
}

func TestNeedsPlugin(t *testing.T) {
	db, err := gorm.Open(nil, &gorm.Config{})
	if err == nil {
		err = db.Use(New(Config{}))
	}
	if !errors.Is(err, ErrNoPlugin) {
		t.Fatalf("db.Use(telemetry) without the plugin: %v, want ErrNoPlugin", err)
	}
}

// TestCounters checks that statements count under the server they ran on,
// by kind and shape, with their latency; a refused one under "none"; and
// the scrape-time gauges.
func TestCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	e := newEnv(t, envOpts{})
	ua, ub := e.userOn(t, "a"), e.userOn(t, "b")
	stmts := func(server, kind, shape string) float64 {
		return e.value(t, "shardkit_statements_total", lbl("server", server, "kind", kind, "shape", shape))
	}
	// Every server's series exist at zero before the first statement.
	for _, s := range []string{"a", "b"} {
		if v := stmts(s, "create", "single"); v != 0 {
			t.Fatalf("%s: %v creates before any", s, v)
		}
	}
	for range 3 {
		if err := e.db.Create(&photos.Photo{UserID: ua, Caption: "x"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.db.Create(&photos.Photo{UserID: ub, Caption: "y"}).Error; err != nil {
		t.Fatal(err)
	}
	var got []photos.Photo
	if err := e.db.Where("user_id = ?", ub).Find(&got).Error; err != nil || len(got) != 1 {
		t.Fatalf("read on b: %d rows, %v", len(got), err)
	}
	if err := e.db.Model(&got[0]).Update("caption", "z").Error; err != nil {
		t.Fatal(err)
	}
	var all []photos.Photo
	if err := e.db.Clauses(plugin.AllShards()).Find(&all).Error; err != nil || len(all) != 4 {
		t.Fatalf("read across shards: %d rows, %v", len(all), err)
	}
	// Refused: no shard key.
	if err := e.db.Where("caption = ?", "x").Find(&all).Error; !errors.Is(err, plugin.ErrMissingShardKey) {
		t.Fatalf("unscoped read: %v, want ErrMissingShardKey", err)
	}
	// Unsharded statements are not the plugin's: not counted.
	var n int
	if err := e.db.Raw("SELECT 1").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}

	want := []struct {
		server, kind, shape string
		n                   float64
	}{
		{"a", "create", "single", 3},
		{"b", "create", "single", 1},
		{"a", "query", "single", 0},
		{"b", "query", "single", 1},
		{"b", "update", "single", 1},
		{"a", "update", "single", 0},
		{"a", "query", "multi", 1},
		{"b", "query", "multi", 1},
		{"none", "query", "none", 1},
	}
	for _, w := range want {
		if got := stmts(w.server, w.kind, w.shape); got != w.n {
			t.Errorf("statements{server=%s,kind=%s,shape=%s} = %v, want %v", w.server, w.kind, w.shape, got, w.n)
		}
	}
	if _, ok := e.metric(t, "shardkit_statements_total", lbl("server", "none", "kind", "raw", "shape", "none")); ok {
		if v := stmts("none", "raw", "none"); v != 0 {
			t.Errorf("an unsharded raw statement counted: %v", v)
		}
	}
	if got := e.value(t, "shardkit_statement_duration_seconds", lbl("server", "a", "kind", "create", "shape", "single")); got != 3 {
		t.Errorf("latency samples of a's creates: %v, want 3", got)
	}
	if sum := e.histogramSum(t, "shardkit_statement_duration_seconds", lbl("server", "a", "kind", "create", "shape", "single")); sum <= 0 {
		t.Errorf("latency sum of a's creates: %v", sum)
	}
	if got := e.value(t, "shardkit_statement_errors_total", lbl("server", "none", "kind", "query", "type", TypeRefused)); got != 1 {
		t.Errorf("refused queries: %v, want 1", got)
	}
	for _, s := range []string{"a", "b"} {
		if got := e.value(t, "shardkit_statement_errors_total", lbl("server", s, "kind", "query", "type", TypeOther)); got != 0 {
			t.Errorf("errors on %s: %v", s, got)
		}
		if got := e.value(t, "shardkit_server_up", lbl("server", s)); got != 1 {
			t.Errorf("server_up{%s} = %v", s, got)
		}
	}
	if got := e.value(t, "shardkit_map_version", nil); got != float64(e.r.Snapshot().Version) {
		t.Errorf("map version %v, want %d", got, e.r.Snapshot().Version)
	}
	if got := e.value(t, "shardkit_id_slot", nil); got != float64(e.gen.Lease().Slot) || got < 1 {
		t.Errorf("id slot %v, want %d", got, e.gen.Lease().Slot)
	}
	if e.value(t, "shardkit_id_lease_valid", nil) != 1 || e.value(t, "shardkit_id_fallback", nil) != 0 {
		t.Error("lease not reported valid, or fallback reported")
	}
	if got := e.value(t, "shardkit_id_database_rows_total", nil); got != 0 {
		t.Errorf("database IDs: %v, want 0", got)
	}
}

// TestIDFallback: with no ID source every new row takes next_id(), and
// the gauges say so.
func TestIDFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	e := newEnv(t, envOpts{cfg: func(c *plugin.Config) { c.IDs = nil }})
	rows := []photos.Photo{{UserID: 1}, {UserID: 2}, {UserID: 3}}
	if err := e.db.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.value(t, "shardkit_id_database_rows_total", nil); got != 3 {
		t.Errorf("database IDs: %v, want 3", got)
	}
	if got := e.value(t, "shardkit_id_fallback", nil); got != 1 {
		t.Errorf("fallback %v, want 1", got)
	}
	if _, ok := e.metric(t, "shardkit_id_slot", nil); ok {
		t.Error("a slot reported with no ID source")
	}
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// lastSpan returns the newest ended span.
func (e *env) lastSpan(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := e.spans.Ended()
	if len(ended) == 0 {
		t.Fatal("no span ended")
	}
	return ended[len(ended)-1]
}

func TestSpans(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	e := newEnv(t, envOpts{})
	for u := int64(1); u <= int64(e.shards); u++ {
		if err := e.db.Create(&photos.Photo{UserID: u}).Error; err != nil {
			t.Fatal(err)
		}
	}
	version := e.r.Snapshot().Version

	ub := e.userOn(t, "b")
	var p photos.Photo
	if err := e.db.Where("user_id = ?", ub).Take(&p).Error; err != nil {
		t.Fatal(err)
	}
	s := e.lastSpan(t)
	a := attrs(s)
	if s.Name() != "shardkit query photos" {
		t.Errorf("single-shard span name %q", s.Name())
	}
	if a[AttrServer].AsString() != "b" || a[AttrShard].AsInt64() != int64(e.shardOf(ub)) || a[AttrFanout].AsInt64() != 1 || a[AttrMapVersion].AsInt64() != version {
		t.Errorf("single-shard span attributes %v; want server b, shard %d, fanout 1, version %d", s.Attributes(), e.shardOf(ub), version)
	}
	if _, ok := a[AttrServers]; ok {
		t.Error("single-shard span lists servers")
	}
	if s.Status().Code == codes.Error {
		t.Errorf("single-shard span status %v", s.Status())
	}

	var all []photos.Photo
	if err := e.db.Clauses(plugin.AllShards()).Find(&all).Error; err != nil {
		t.Fatal(err)
	}
	s = e.lastSpan(t)
	a = attrs(s)
	wantShards := make([]int64, e.shards)
	for i := range wantShards {
		wantShards[i] = int64(i)
	}
	servers := a[AttrServers].AsStringSlice()
	slices.Sort(servers)
	if s.Name() != "shardkit query photos" || !slices.Equal(servers, []string{"a", "b"}) ||
		!slices.Equal(a[AttrShards].AsInt64Slice(), wantShards) || a[AttrFanout].AsInt64() != int64(e.shards) {
		t.Errorf("multi-shard span %q attributes %v; want servers a and b, shards 0-%d, fanout %d", s.Name(), s.Attributes(), e.shards-1, e.shards)
	}
	if _, ok := a[AttrServer]; ok {
		t.Error("multi-shard span names one server")
	}

	// A refusal: a span with the error type, no server.
	if err := e.db.Where("caption = ?", "x").Find(&all).Error; !errors.Is(err, plugin.ErrMissingShardKey) {
		t.Fatalf("unscoped read: %v", err)
	}
	s = e.lastSpan(t)
	a = attrs(s)
	if a[AttrErrorType].AsString() != TypeRefused || s.Status().Code != codes.Error {
		t.Errorf("refused span: attributes %v status %v", s.Attributes(), s.Status())
	}

	// The span is the statement's context while it runs, and the
	// caller's context is given back afterwards.
	ctx, parent := sdktrace.NewTracerProvider().Tracer("test").Start(context.Background(), "request")
	defer parent.End()
	tx := e.db.WithContext(ctx).Where("user_id = ?", ub)
	if err := tx.Take(&p).Error; err != nil {
		t.Fatal(err)
	}
	if tx.Statement.Context != ctx {
		t.Error("the statement's context was not given back")
	}
	if s := e.lastSpan(t); s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("statement span's parent %v, want the caller's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	// An unsharded statement makes no span.
	before := len(e.spans.Ended())
	var n int
	if err := e.db.Raw("SELECT 1").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if len(e.spans.Ended()) != before {
		t.Error("an unsharded statement made a span")
	}
}

// TestServerDown stops server b's cluster: its statements count as
// server_unavailable errors under b and b is reported down; once it is
// back, up again.
func TestServerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	ctx := context.Background()
	set := pgtest.Set(t)
	c, err := set.Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	e := newEnv(t, envOpts{dsnB: pgtest.NewDatabase(t, len(set.Clusters)-1)})
	ua, ub := e.userOn(t, "a"), e.userOn(t, "b")
	for _, u := range []int64{ua, ub} {
		if err := e.db.Create(&photos.Photo{UserID: u}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	var p photos.Photo
	if err := e.db.Where("user_id = ?", ub).Take(&p).Error; !errors.Is(err, plugin.ErrServerUnavailable) {
		t.Fatalf("read on stopped b: %v", err)
	}
	if err := e.db.Create(&photos.Photo{UserID: ub}).Error; !errors.Is(err, plugin.ErrServerUnavailable) {
		t.Fatalf("write on stopped b: %v", err)
	}
	var all []photos.Photo
	if err := e.db.Clauses(plugin.AllShards()).Find(&all).Error; !errors.Is(err, plugin.ErrServerUnavailable) {
		t.Fatalf("read across shards with b stopped: %v", err)
	}
	var pa photos.Photo
	if err := e.db.Where("user_id = ?", ua).Take(&pa).Error; err != nil {
		t.Fatalf("read on a: %v", err)
	}
	errs := func(server, kind string) float64 {
		return e.value(t, "shardkit_statement_errors_total", lbl("server", server, "kind", kind, "type", TypeServerUnavailable))
	}
	if errs("b", "query") != 2 || errs("b", "create") != 1 || errs("a", "query") != 0 {
		t.Errorf("server_unavailable errors: b query %v (want 2), b create %v (want 1), a query %v (want 0)",
			errs("b", "query"), errs("b", "create"), errs("a", "query"))
	}
	if up := e.value(t, "shardkit_server_up", lbl("server", "b")); up != 0 {
		t.Errorf("server_up{b} = %v with b stopped", up)
	}
	if up := e.value(t, "shardkit_server_up", lbl("server", "a")); up != 1 {
		t.Errorf("server_up{a} = %v", up)
	}
	s := e.lastSpan(t) // the read on a
	if attrs(s)[AttrServer].AsString() != "a" {
		t.Errorf("last span %v, want the read on a", s.Attributes())
	}

	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, 60*time.Second, func() error {
		var back photos.Photo
		err := e.db.Where("user_id = ?", ub).Take(&back).Error
		if err != nil && !errors.Is(err, plugin.ErrServerUnavailable) {
			t.Fatalf("after restart: %v", err)
		}
		return err
	})
	if got := e.value(t, "shardkit_server_up", lbl("server", "b")); got != 1 {
		t.Errorf("server_up{b} = %v after b answered", got)
	}
}

// TestFenceWait fences a shard: a write waits FenceWait, fails, and the
// wait shows in the fence histogram, the errors and the span.
func TestFenceWait(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	const wait = 500 * time.Millisecond
	e := newEnv(t, envOpts{cfg: func(c *plugin.Config) { c.FenceWait = wait }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = e.r.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	user := int64(5)
	shard := e.shardOf(user)
	home := e.serverOf(t, shard)
	e.setShard(t, shard, home, router.StateFenced)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pl, _ := e.r.Snapshot().Placement(shard); pl.State == router.StateFenced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the router did not see the fence")
		}
		time.Sleep(10 * time.Millisecond) // poll: the condition is the router's map
	}
	start := time.Now()
	err := e.db.Create(&photos.Photo{UserID: user}).Error
	took := time.Since(start)
	if !errors.Is(err, plugin.ErrShardFenced) {
		t.Fatalf("write on a fenced shard: %v, want ErrShardFenced", err)
	}
	fl := lbl("server", home)
	if n := e.value(t, "shardkit_fence_wait_seconds", fl); n != 1 {
		t.Fatalf("fence waits observed: %v, want 1", n)
	}
	if sum := e.histogramSum(t, "shardkit_fence_wait_seconds", fl); sum < wait.Seconds() || sum > took.Seconds() {
		t.Errorf("fence wait %vs, want between %v and the write's %v", sum, wait, took)
	}
	if got := e.value(t, "shardkit_statement_errors_total", lbl("server", home, "kind", "create", "type", TypeFenceTimeout)); got != 1 {
		t.Errorf("fence_timeout errors on %s: %v, want 1", home, got)
	}
	a := attrs(e.lastSpan(t))
	if ms := a[AttrFenceWait].AsFloat64(); ms < float64(wait.Milliseconds()) || a[AttrErrorType].AsString() != TypeFenceTimeout || a[AttrShard].AsInt64() != int64(shard) {
		t.Errorf("span attributes %v; want fence_wait_ms ≥ %d, error type %s, shard %d", e.lastSpan(t).Attributes(), wait.Milliseconds(), TypeFenceTimeout, shard)
	}
}
