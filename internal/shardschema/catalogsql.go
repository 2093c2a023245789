package shardschema

import (
	"context"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/shardkit/shardkit/catalog"
)

// CatalogSQL returns the application's per-shard SQL files as recorded in
// the catalog by migrations.Provision and Migrate, as a file system for
// ApplyShard: the shard mover creates a target schema from it without
// needing the application's files. It returns nil (no files) when none are
// recorded.
func CatalogSQL(ctx context.Context, cat *catalog.Catalog) (fs.FS, error) {
	files, err := cat.ShardSQL(ctx)
	if err != nil {
		return nil, fmt.Errorf("shardkit: read per-shard SQL from the catalog: %w", err)
	}
	if len(files) == 0 {
		return nil, nil
	}
	out := fstest.MapFS{}
	for _, f := range files {
		out[f.Name] = &fstest.MapFile{Data: []byte(f.Body), Mode: 0o444}
	}
	return out, nil
}
