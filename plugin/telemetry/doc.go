// Package telemetry is shardkit's opt-in observability: Prometheus metrics
// per physical server and an OpenTelemetry span per routed statement, read
// from the plugin's own routing decisions ([plugin.Routed],
// [plugin.Plugin.State]).
//
// # Installing it
//
// [New] returns a GORM plugin that is also a prometheus.Collector; install
// it after the shardkit plugin:
//
//	db.Use(plugin.Register(cfg, &Photo{}))   // the shardkit plugin first
//	t := telemetry.New(telemetry.Config{})    // spans from otel's global provider
//	if err := db.Use(t); err != nil { … }
//	registry.MustRegister(t)                  // t is a prometheus.Collector
//
// # Metrics
//
// Labels: server is the physical server, "none" for a statement
// the plugin refused, which reached none; kind is create, query, update,
// delete, row or raw; shape is single, multi, or none for a refusal.
// Statements on unsharded tables are not the plugin's and not counted.
//
//	shardkit_statements_total{server,kind,shape}           counter
//	shardkit_statement_errors_total{server,kind,type}      counter; type: server_unavailable,
//	                                                        shard_moved, fence_timeout, refused, other
//	shardkit_statement_duration_seconds{server,kind,shape} histogram
//	shardkit_fence_wait_seconds{server}                    histogram
//	shardkit_server_up{server}                             gauge, 0 while the plugin takes it as down
//	shardkit_map_version                                   gauge
//	shardkit_id_slot, shardkit_id_lease_valid              gauges (ID sources with a slot lease)
//	shardkit_id_fallback                                   gauge, 1 while new rows take next_id()
//	shardkit_id_database_rows_total                        counter, rows whose ID came from next_id()
//
// A multi-shard statement counts once for each server it reached, and its
// whole duration is observed under each of them.
//
// # Spans
//
// Spans are named "shardkit <kind> <table>" and carry shardkit.server or
// shardkit.servers, shardkit.shard or shardkit.shards (at most
// [Config.MaxShardAttrs] numbers), shardkit.fanout (shards), shardkit.map_version,
// shardkit.fence_wait_ms and shardkit.error_type. The package uses the
// OpenTelemetry API only: without an SDK the spans are no-ops.
//
// Without this package (or another caller of plugin.Observe) the plugin
// records nothing and routing costs nothing extra.
package telemetry
