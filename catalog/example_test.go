package catalog_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// A service opens the catalog, routes with a Router that watches it, and
// issues IDs in a slot leased from it. This example needs a catalog
// database, so it is compiled but not run (no Output line).
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := catalog.Open(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cat.Close()
	rt, err := router.New(ctx, cat) // errors.Is(err, catalog.ErrNoCatalog): provision it first
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = rt.Watch(ctx) }()

	ids, stop, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{Holder: "photos-api"}, idgen.Config{})
	if errors.Is(err, catalog.ErrNoFreeSlot) {
		fmt.Println("no free slot: leave the key to the column's DEFAULT next_id()")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	shard, _ := router.ShardOfKey(42, rt.Snapshot().Shards)
	id, err := ids.Next(ctx, shard)
	fmt.Println(id, err)
}
