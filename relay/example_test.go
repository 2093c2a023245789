package relay_test

import (
	"context"

	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

// watchThroughRelay is what an application on a host with a relay does
// instead of watching the catalog: the router waits on the relay for each
// new map version.
func watchThroughRelay(ctx context.Context, use func(*router.Router)) error {
	r, err := router.New(ctx, relay.Dial("/run/shardkit/relay.sock"))
	if err != nil {
		return err // relay.ErrUnavailable: the relay is not running at that path
	}
	go r.WatchWith(ctx, router.WatchOptions{Listen: true})
	use(r)
	return nil
}

func ExampleDial() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = watchThroughRelay(ctx, func(r *router.Router) {
		// plugin.Register(plugin.Config{Router: r}, models...)
	})
}
