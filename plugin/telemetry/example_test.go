package telemetry_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/plugin/telemetry"
	"github.com/shardkit/shardkit/router"
)

type Photo struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64 `shard:"key"`
}

// Telemetry installed after the plugin, on a shard map made by hand (four
// shards on two servers); DryRun routes each statement without sending it.
// In a service the tracer provider is the application's and the registry
// is the one its /metrics handler serves.
func Example() {
	const nowhere = "postgres://x@127.0.0.1:1/x?connect_timeout=1"
	servers := []router.Server{{Name: "pg1", DSN: nowhere, State: "active"}, {Name: "pg2", DSN: nowhere, State: "active"}}
	var placements []router.Placement
	for s := range 4 {
		placements = append(placements, router.Placement{Shard: s, Server: servers[s%2].Name, Schema: router.SchemaName(s), State: router.StateActive})
	}
	snap, err := router.NewSnapshot(7, 4, servers, placements)
	if err != nil {
		panic(err)
	}
	snap.Layout = idgen.DefaultLayout()
	rt, err := router.NewFixed(snap)
	if err != nil {
		panic(err)
	}
	db, err := gorm.Open(postgres.Open(nowhere), &gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		panic(err)
	}
	p := plugin.Register(plugin.Config{Router: rt, SkipTableCheck: true}, &Photo{})
	if err := db.Use(p); err != nil { // the shardkit plugin first
		panic(err)
	}
	defer p.Close()
	spans := tracetest.NewSpanRecorder()
	t := telemetry.New(telemetry.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err := db.Use(t); err != nil {
		panic(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(t)

	var photos []Photo
	dry := db.Session(&gorm.Session{DryRun: true})
	dry.Where("user_id = ?", 42).Find(&photos) // shard 2, on pg1
	dry.Find(&photos)                          // no shard key: refused

	for _, s := range spans.Ended() {
		fmt.Print(s.Name())
		for _, a := range s.Attributes() {
			fmt.Printf(" %s=%s", a.Key, a.Value.String())
		}
		fmt.Println()
	}
	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() == "shardkit_map_version" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// shardkit query photos db.system.name=postgresql db.operation.name=query shardkit.fanout=1 shardkit.map_version=7 db.collection.name=photos shardkit.server=pg1 shardkit.shard=2
	// shardkit query photos db.system.name=postgresql db.operation.name=query shardkit.fanout=0 shardkit.map_version=7 db.collection.name=photos shardkit.error_type=refused
	// shardkit_map_version 7
}
