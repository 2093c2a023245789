package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// The README's quickstart is the code between the quickstart markers,
// verbatim: TestReadmeQuickstart checks the README holds it, and
// TestQuickstartRuns runs it on real clusters.

// quickstart:begin

// Photo is a sharded model: its rows live in the shard of their user.
type Photo struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64 `shard:"key"` // logical shard = user_id mod 2000
}

func run(ctx context.Context, catalogDSN, defaultDSN string) error {
	cat, err := catalog.Open(ctx, catalogDSN) // the shard map lives here
	if err != nil {
		return err
	}
	defer cat.Close()
	rt, err := router.New(ctx, cat)
	if err != nil {
		return err
	}
	go func() { _ = rt.Watch(ctx) }() // shard-map changes apply live
	// Lease an ID slot from the catalog: IDs are then made in Go.
	ids, stopIDs, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{Holder: "photos-api"}, idgen.Config{})
	if err != nil {
		return err // catalog.ErrNoFreeSlot: pass IDs: nil, rows take DEFAULT next_id()
	}
	defer stopIDs()

	db, err := gorm.Open(postgres.Open(defaultDSN), &gorm.Config{})
	if err != nil {
		return err
	}
	p := plugin.Register(plugin.Config{Router: rt, IDs: ids}, &Photo{})
	if err := db.Use(p); err != nil {
		return err // e.g. a model whose table the shard schemas lack
	}
	defer p.Close()

	photo := Photo{UserID: 42}
	if err := db.Create(&photo).Error; err != nil { // ID made in Go, INSERT on shard_0042's server
		return err
	}
	var again Photo
	if err := db.First(&again, photo.ID).Error; err != nil { // shard decoded from the ID's bits
		return err
	}
	var photos []Photo
	if err := db.Where("user_id = ?", 42).Find(&photos).Error; err != nil { // routed by the shard key
		return err
	}
	err = db.Find(&photos).Error // no shard key, no ID: refused, never sent anywhere
	if !errors.Is(err, plugin.ErrMissingShardKey) {
		return fmt.Errorf("a keyless read was not refused: %v", err)
	}
	return nil
}

// quickstart:end

// ExampleRegister wires the plugin as the README's quickstart does: a
// router on the catalog (watching for map changes), an ID generator
// leasing a slot, and the plugin on a gorm.DB whose default connection
// holds no sharded table.
func ExampleRegister() {
	ctx := context.Background()
	if err := run(ctx, "postgres://catalog-host/shardkit", "postgres://app-host/app"); err != nil {
		log.Fatal(err)
	}
}

func TestQuickstartRuns(t *testing.T) {
	ctx := context.Background()
	e := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: 64})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := run(cctx, e.CatalogDSN, pgtest.NewDatabase(t, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestReadmeQuickstart(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin := strings.Index(s, "// quickstart:begin\n\n") + len("// quickstart:begin\n\n")
	end := strings.Index(s, "\n// quickstart:end")
	code := s[begin:end]
	if !strings.Contains(string(readme), "```go\n"+code+"```\n") {
		t.Fatalf("README.md's quickstart differs from the code in example_test.go; paste this:\n```go\n%s```", code)
	}
}
