package relay_test

import (
	"context"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

// watchThroughRelay is what an application on a host with a relay does
// instead of watching the catalog: the router waits on the relay for each
// new map version, and the client checks each against the catalog (the
// application's own, opened with its DSN).
func watchThroughRelay(ctx context.Context, cat *catalog.Catalog, use func(*router.Router)) error {
	c, err := relay.DialWith("/run/shardkit/relay.sock", relay.Options{Catalog: cat})
	if err != nil {
		return err
	}
	r, err := router.New(ctx, c)
	if err != nil {
		return err // relay.ErrUnavailable: the relay is not running at that path; relay.ErrOtherCatalog: it serves another catalog
	}
	go r.WatchWith(ctx, router.WatchOptions{Listen: true})
	use(r)
	return nil
}

func ExampleDialWith() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cat *catalog.Catalog // catalog.Open(ctx, appCatalogDSN)
	_ = func() error {
		return watchThroughRelay(ctx, cat, func(r *router.Router) {
			// plugin.Register(plugin.Config{Router: r}, models...)
		})
	}
}
