package migrations_test

import (
	"context"
	"fmt"
	"os"
	"testing/fstest"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/migrations"
)

// Provision sets up a catalog and its servers once; Migrate applies the
// application's new per-shard files later. This example needs live
// databases, so it is compiled but not run (no Output line).
func ExampleProvision() {
	ctx := context.Background()
	cat, err := catalog.Open(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cat.Close()
	err = migrations.Provision(ctx, cat, migrations.ProvisionOptions{
		Servers: []migrations.ServerSpec{
			{Name: "a", DSN: "postgres://server-a/app"},
			{Name: "b", DSN: "postgres://server-b/app"},
		},
		Shards:   2000,                   // fixed for the catalog's lifetime
		ShardSQL: os.DirFS("./shardsql"), // 0001_photos.sql, 0001_photos.indexes.sql, …
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Later, with a new 0002_likes.sql in the directory:
	if err := migrations.Migrate(ctx, cat, os.DirFS("./shardsql"), migrations.MigrateOptions{}); err != nil {
		fmt.Println(err)
	}
}

// ReadVersions pairs each NNNN_name.sql with its NNNN_name.indexes.sql,
// in version order; it needs no database.
func ExampleReadVersions() {
	files := fstest.MapFS{
		"0001_photos.sql":         {Data: []byte("CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL);")},
		"0001_photos.indexes.sql": {Data: []byte("CREATE INDEX photos_user ON photos (user_id);")},
		"0002_likes.sql":          {Data: []byte("CREATE TABLE likes (id bigint PRIMARY KEY DEFAULT next_id());")},
	}
	versions, err := migrations.ReadVersions(files)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range versions {
		fmt.Println(v.Number, v.Name, v.Indexes != "")
	}
	// Output:
	// 1 0001_photos.sql true
	// 2 0002_likes.sql false
}
