package plugin_test

import (
	"context"
	"errors"
	"log"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// ExampleRegister wires the plugin: a router on the catalog (watching for
// map changes), an ID generator leasing a slot, and the plugin on a
// gorm.DB whose default connection holds no sharded table.
func ExampleRegister() {
	type Photo struct {
		ID     int64
		UserID int64 `shard:"key"`
	}
	ctx := context.Background()
	cat, err := router.OpenCatalog(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		log.Fatal(err)
	}
	r, err := router.New(ctx, cat)
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Watch(ctx) }()
	ids, stop, err := router.StartGenerator(ctx, cat, router.LeaserConfig{}, idgen.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	db, err := gorm.Open(postgres.Open("postgres://catalog-host/shardkit"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p := plugin.Register(plugin.Config{Router: r, IDs: ids}, &Photo{})
	if err := db.Use(p); err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	photo := Photo{UserID: 42}
	db.Create(&photo) // photo.ID is set; the row is in shard_0042.photos
	var mine []Photo
	db.Where("user_id = ?", 42).Find(&mine)
	err = db.Find(&mine).Error // no key: refused, never sent anywhere
	if errors.Is(err, plugin.ErrMissingShardKey) {
		log.Print(err)
	}
}
