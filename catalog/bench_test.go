package catalog

import (
	"context"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// BenchmarkReload compares what a router reads after a map change of one
// shard on a 2000-shard map: the whole map (Load, as a LISTEN
// notification or a fence error triggers) against the changed rows
// (LoadChanges, as polling does), and the version check alone.
func BenchmarkReload(b *testing.B) {
	cat, _ := seedCatalog(b, 2000, idgen.DefaultLayout())
	ctx := context.Background()
	before, err := cat.Load(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cat.PlaceShard(ctx, 7, "alpha", router.StateActive); err != nil {
		b.Fatal(err)
	}
	b.Run("Load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cat.Load(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LoadChanges", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cat.LoadChanges(ctx, before); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("MapVersion", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cat.MapVersion(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
