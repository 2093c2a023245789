package plugin_test

import (
	"errors"
	"fmt"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// Where statements go, shown on a shard map made by hand (four shards on
// two servers) with nothing sent to any database: DryRun builds and
// routes each statement. In a service the map comes from the catalog
// (router.New) and the statements run.
func Example_routing() {
	const nowhere = "postgres://x@127.0.0.1:1/x?connect_timeout=1"
	servers := []router.Server{{Name: "pg1", DSN: nowhere, State: "active"}, {Name: "pg2", DSN: nowhere, State: "active"}}
	var placements []router.Placement
	for s := range 4 {
		placements = append(placements, router.Placement{Shard: s, Server: servers[s%2].Name, Schema: router.SchemaName(s), State: router.StateActive})
	}
	snap, err := router.NewSnapshot(1, 4, servers, placements)
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
	if err := db.Use(p); err != nil {
		panic(err)
	}
	defer p.Close()
	dry := db.Session(&gorm.Session{DryRun: true})

	var photos []Photo
	stmt := dry.Where("user_id = ?", 42).Find(&photos).Statement // 42 mod 4 = shard 2
	fmt.Println(stmt.SQL.String())

	id, _ := snap.Layout.Compose(snap.Layout.EpochMs+1, 3, 0) // an ID made in shard 3
	var photo Photo
	stmt = dry.First(&photo, id).Statement
	shard, _ := plugin.RoutedShard(stmt)
	fmt.Println(shard)

	err = dry.Where("user_id = ?", 42).Or("user_id = ?", 43).Find(&photos).Error
	fmt.Println(err == nil) // both shards, read and merged

	err = dry.Find(&photos).Error
	fmt.Println(errors.Is(err, plugin.ErrMissingShardKey)) // no key, no ID: refused
	// Output:
	// SELECT * FROM "shard_0002"."photos" WHERE user_id = $1
	// 3
	// true
	// true
}
