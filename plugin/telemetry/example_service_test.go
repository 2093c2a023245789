package telemetry_test

import (
	"log"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/plugin/telemetry"
)

// Telemetry in a service: the shardkit plugin first, then the telemetry,
// whose spans go to the global tracer provider and whose metrics join the
// default Prometheus registry. Compiled, not run: it needs the
// application's database and shard map.
func Example_service() {
	// db and cfg (its Router and IDs) are the application's, as in the
	// plugin's ExampleRegister.
	var db *gorm.DB
	var cfg plugin.Config
	if err := db.Use(plugin.Register(cfg, &Photo{})); err != nil { // the shardkit plugin first
		log.Fatal(err)
	}
	t := telemetry.New(telemetry.Config{}) // spans from otel.GetTracerProvider()
	if err := db.Use(t); err != nil {
		log.Fatal(err)
	}
	prometheus.MustRegister(t)
}
