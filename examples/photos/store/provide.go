package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/wire"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/metrics"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/resolver"
	"github.com/shardkit/shardkit/router"
)

// CatalogDSN is the DSN of the shardkit catalog database.
type CatalogDSN string

// FenceWait bounds how long a write waits on a shard fenced for a move.
type FenceWait time.Duration

// ProviderSet provides the catalog, the router (watching the map), the ID
// generator, the GORM handle with the shardkit plugin, the row counter, the
// fence watcher and the Store.
var ProviderSet = wire.NewSet(OpenCatalog, NewRouter, NewIDs, OpenDB, NewStats, New)

// OpenCatalog connects to the catalog.
func OpenCatalog(ctx context.Context, dsn CatalogDSN) (*catalog.Catalog, func(), error) {
	cat, err := catalog.Open(ctx, string(dsn))
	if err != nil {
		return nil, nil, err
	}
	return cat, cat.Close, nil
}

// NewRouter loads the shard map and keeps it current (LISTEN) until cleanup.
func NewRouter(ctx context.Context, cat *catalog.Catalog, log *slog.Logger) (*router.Router, func(), error) {
	rt, err := router.New(ctx, cat)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rt.Watch(wctx)
	}()
	log.Info("shard map loaded", "version", rt.Snapshot().Version, "shards", rt.Snapshot().Shards,
		"servers", len(rt.Snapshot().Servers()))
	return rt, func() { cancel(); <-done }, nil
}

// NewIDs leases an ID slot from the catalog and returns the generator that
// issues keys in it; the cleanup releases the slot.
func NewIDs(ctx context.Context, cat *catalog.Catalog) (*idgen.Generator, func(), error) {
	host, _ := os.Hostname()
	return catalog.StartGenerator(ctx, cat,
		catalog.LeaserConfig{Holder: fmt.Sprintf("photos@%s:%d", host, os.Getpid())}, idgen.Config{})
}

// OpenDB opens GORM with the shardkit plugin and its telemetry (m). The
// default connection is the catalog: no sharded table lives there, so a
// statement the plugin did not route fails instead of landing on the wrong
// server. It also runs a resolver until cleanup: Follow and Unfollow are
// atomic transactions across shards, and whatever a process killed while
// committing one leaves prepared is finished by the next pass of any
// instance's resolver.
func OpenDB(dsn CatalogDSN, rt *router.Router, ids *idgen.Generator, fence FenceWait, m *metrics.Metrics, log *slog.Logger) (*gorm.DB, func(), error) {
	db, err := gorm.Open(postgres.Open(string(dsn)), &gorm.Config{
		Logger: logger.Discard,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("photos: open GORM: %w", err)
	}
	closeDB := func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
	p := plugin.Register(plugin.Config{
		Router:    rt,
		IDs:       ids,
		FenceWait: time.Duration(fence),
	}, Models()...)
	if err := db.Use(p); err != nil {
		closeDB()
		return nil, nil, fmt.Errorf("photos: register the shardkit plugin: %w", err)
	}
	if err := m.InstrumentGORM(db); err != nil {
		closeDB()
		return nil, nil, err
	}
	// The resolver connects with the application's DSNs (the router holds no
	// admin DSN): the application's role finishes the transactions it
	// prepared itself.
	res := resolver.New(resolver.Config{Servers: rt, Databases: map[string]string{"catalog": string(dsn)}, Logger: log})
	if err := m.WatchInDoubt(res.Last); err != nil {
		closeDB()
		return nil, nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = res.Run(rctx)
	}()
	return db, func() { stop(); <-done; _ = p.Close(); closeDB() }, nil
}
