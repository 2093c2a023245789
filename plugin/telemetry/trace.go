package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardkit/shardkit/plugin"
)

// Span attribute keys.
const (
	AttrServer     = attribute.Key("shardkit.server")        // the one physical server
	AttrServers    = attribute.Key("shardkit.servers")       // the servers of a multi-server statement
	AttrShard      = attribute.Key("shardkit.shard")         // the one logical shard
	AttrShards     = attribute.Key("shardkit.shards")        // the shards, up to Config.MaxShardAttrs
	AttrFanout     = attribute.Key("shardkit.fanout")        // number of logical shards
	AttrMapVersion = attribute.Key("shardkit.map_version")   // shard map version of the decision
	AttrFenceWait  = attribute.Key("shardkit.fence_wait_ms") // time the write waited on fenced shards
	AttrErrorType  = attribute.Key("shardkit.error_type")    // see ErrorType
)

// finish names the span, sets its attributes and ends it.
func (t *Telemetry) finish(span trace.Span, k kind, info plugin.RouteInfo, err error, errType string) {
	name := "shardkit " + kindNames[k]
	if info.Table != "" {
		name += " " + info.Table
	}
	span.SetName(name)
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		attribute.String("db.system.name", "postgresql"),
		attribute.String("db.operation.name", kindNames[k]),
		AttrFanout.Int(len(info.Shards)),
		AttrMapVersion.Int64(info.Version))
	if info.Table != "" {
		attrs = append(attrs, attribute.String("db.collection.name", info.Table))
	}
	switch len(info.Servers) {
	case 0:
	case 1:
		attrs = append(attrs, AttrServer.String(info.Servers[0]))
	default:
		attrs = append(attrs, AttrServers.StringSlice(info.Servers))
	}
	switch n := len(info.Shards); {
	case n == 1:
		attrs = append(attrs, AttrShard.Int(info.Shards[0]))
	case n > 1 && n <= t.cfg.MaxShardAttrs:
		attrs = append(attrs, AttrShards.IntSlice(info.Shards))
	}
	if info.FenceWait > 0 {
		attrs = append(attrs, AttrFenceWait.Float64(float64(info.FenceWait.Microseconds())/1000))
	}
	if errType != "" {
		attrs = append(attrs, AttrErrorType.String(errType))
		span.RecordError(err)
		span.SetStatus(codes.Error, errType)
	}
	span.SetAttributes(attrs...)
	span.End()
}
