package telemetry

import (
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
)

// pairBlock is how many statements each side runs before the other.
const pairBlock = 500

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTelemetryOverhead measures what the telemetry adds to a
// statement: each operation runs in DryRun (built and routed, not sent)
// through a gorm.DB with the plugin and the telemetry, and through one
// with the plugin alone on the same map, in alternating blocks, and
// reports the difference per statement by the process's CPU time and by
// the clock ("base" is the statement through the plugin alone), and the
// allocations it adds. The tracer is a no-op (no OpenTelemetry SDK, the library's
// default) or the SDK's, sampling every span and exporting none.
//
//	go test ./plugin/telemetry -run '^$' -bench BenchmarkTelemetryOverhead -benchtime 100000x -count 4
func BenchmarkTelemetryOverhead(b *testing.B) {
	e := newEnv(b, envOpts{})
	bare, _ := e.open(b, e.cfg, nil)
	const users = 1000
	ids := make([]int64, users)
	for i := range ids {
		p := photos.Photo{UserID: int64(i + 1), Caption: "x"}
		if err := bare.Create(&p).Error; err != nil {
			b.Fatal(err)
		}
		ids[i] = p.ID
	}
	ops := []struct {
		name string
		fn   func(db *gorm.DB, i int) error
	}{
		{"select_by_key", func(db *gorm.DB, i int) error { var p photos.Photo; return db.Where("user_id = ?", i+1).Take(&p).Error }},
		{"select_by_id", func(db *gorm.DB, i int) error { var p photos.Photo; return db.First(&p, ids[i]).Error }},
		{"update_by_id", func(db *gorm.DB, i int) error {
			return db.Model(&photos.Photo{ID: ids[i]}).Update("caption", "u").Error
		}},
		{"insert_one", func(db *gorm.DB, i int) error {
			return db.Create(&photos.Photo{ID: ids[i], UserID: int64(i + 1), Caption: "one"}).Error
		}},
		{"select_all_shards", func(db *gorm.DB, i int) error {
			var ps []photos.Photo
			return db.Where("caption = ?", "x").Find(&ps).Error
		}},
	}
	sdk := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = sdk.Shutdown(b.Context()) })
	tracers := []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"noop_tracer", noop.NewTracerProvider()},
		{"sdk_tracer", sdk},
	}
	bd := bare.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	for _, tr := range tracers {
		db, _ := e.open(b, e.cfg, New(Config{TracerProvider: tr.tp}))
		td := db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
		for _, o := range ops {
			b.Run(tr.name+"/"+o.name, func(b *testing.B) {
				bd, td := bd, td
				if o.name == "select_all_shards" {
					all := &gorm.Session{DryRun: true, SkipDefaultTransaction: true}
					bd, td = bd.Clauses(plugin.AllShards()).Session(all), td.Clauses(plugin.AllShards()).Session(all)
				}
				run(b, func(i int) error { return o.fn(td, i) }, func(i int) error { return o.fn(bd, i) }, users)
			})
		}
	}
}

// run measures with against without in alternating blocks, and their
// allocations.
func run(b *testing.B, with, without func(i int) error, users int) {
	aw := testing.AllocsPerRun(100, func() { _ = with(0) })
	ao := testing.AllocsPerRun(100, func() { _ = without(0) })
	b.ResetTimer()
	var ws, wp, cs, cp time.Duration
	n := 0
	for i := 0; i < b.N; i += pairBlock {
		w0, c0 := time.Now(), processCPU()
		for j := i; j < i+pairBlock; j++ {
			if err := with(j % users); err != nil {
				b.Fatal(err)
			}
		}
		w1, c1 := time.Now(), processCPU()
		for j := i; j < i+pairBlock; j++ {
			if err := without(j % users); err != nil {
				b.Fatal(err)
			}
		}
		ws, wp = ws+w1.Sub(w0), wp+time.Since(w1)
		cs, cp = cs+c1-c0, cp+processCPU()-c1
		n += pairBlock
	}
	f := float64(n)
	b.ReportMetric(float64(cp.Nanoseconds())/f, "base-cpu-ns/op")
	b.ReportMetric(float64((cs-cp).Nanoseconds())/f, "overhead-cpu-ns/op")
	b.ReportMetric(float64(wp.Nanoseconds())/f, "base-ns/op")
	b.ReportMetric(float64((ws-wp).Nanoseconds())/f, "overhead-ns/op")
	b.ReportMetric(aw-ao, "overhead-allocs/op")
}
