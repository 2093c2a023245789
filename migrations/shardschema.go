package migrations

import "github.com/shardkit/shardkit/internal/shardschema"

// The operations that only shardkit's own packages use (the shard mover,
// backup's restore) are internal/shardschema's API; they share this
// package's per-schema machinery, so it implements them.
func init() {
	shardschema.Register(shardschema.Ops{
		ApplyShard:   applyShard,
		ApplyIndexes: applyIndexes,
		DropShard:    dropShard,
		EnsureServer: ensureServer,
		CatalogSQL:   catalogSQL,
	})
}
