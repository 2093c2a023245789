package router_test

import (
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/router"
)

// A user's rows live in the logical shard of the user's ID, in the schema
// of that shard.
func ExampleShardOfKey() {
	shard, err := router.ShardOfKey(31_337, 2000)
	if err != nil {
		panic(err)
	}
	fmt.Println(shard, router.SchemaName(shard))

	_, err = router.ShardOfKey(-1, 2000)
	fmt.Println(errors.Is(err, router.ErrNegativeKey))
	// Output:
	// 1337 shard_1337
	// true
}

// A string key (a username, a tenant's name) is hashed with a hash that
// never changes between releases.
func ExampleShardOfString() {
	shard, err := router.ShardOfString("alice", 2000)
	if err != nil {
		panic(err)
	}
	fmt.Println(shard == int(router.HashString("alice")%2000))
	// Output: true
}

// A snapshot is one version of the shard map: where each logical shard
// lives. Routers load it from the catalog (Catalog.Load) and watch for new
// versions; the plugin routes every statement with one snapshot.
func ExampleNewSnapshot() {
	servers := []router.Server{{Name: "pg1", State: "active"}, {Name: "pg2", State: "active"}}
	var placements []router.Placement
	for s := range 4 {
		placements = append(placements, router.Placement{Shard: s, Server: servers[s%2].Name,
			Schema: router.SchemaName(s), State: router.StateActive})
	}
	snap, err := router.NewSnapshot(1, 4, servers, placements)
	if err != nil {
		panic(err)
	}
	p, _ := snap.Placement(3)
	fmt.Println(p.Server, p.Schema, snap.ShardsOn("pg1"))

	// A map that leaves a shard out is refused.
	_, err = router.NewSnapshot(2, 5, servers, placements)
	fmt.Println(err != nil)
	// Output:
	// pg2 shard_0003 [0 2]
	// true
}
