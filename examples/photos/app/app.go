package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/metrics"
	"github.com/shardkit/shardkit/examples/photos/shardsql"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// App is the assembled service.
type App struct {
	Server  *http.Server
	Catalog *catalog.Catalog
	Router  *router.Router
	Store   *store.Store
	Stats   *store.Stats
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// ShutdownTimeout bounds how long Serve waits for requests in flight.
const ShutdownTimeout = 10 * time.Second

// Serve listens on the server's address and serves until ctx ends, then
// shuts down gracefully (requests in flight finish, up to ShutdownTimeout).
func (a *App) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.Server.Addr)
	if err != nil {
		return err
	}
	return a.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener.
func (a *App) ServeListener(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- a.Server.Serve(ln) }()
	a.Log.Info("serving", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := a.Server.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Provision creates or completes the catalog and the shard schemas on
// cfg.Servers with the example's per-shard SQL. It is idempotent; servers
// new to an existing catalog are registered without shards.
func Provision(ctx context.Context, cfg Config, log *slog.Logger) error {
	cat, err := catalog.Open(ctx, string(cfg.Catalog))
	if err != nil {
		return err
	}
	defer cat.Close()
	start := time.Now()
	last := time.Now()
	err = migrations.Provision(ctx, cat, migrations.ProvisionOptions{
		Servers:  cfg.Servers,
		Shards:   cfg.Shards,
		ShardSQL: shardsql.FS,
		Progress: func(p migrations.Progress) {
			if time.Since(last) > 2*time.Second || p.Done == p.Total {
				last = time.Now()
				log.Info("provisioning", "done", p.Done, "total", p.Total)
			}
		},
	})
	if err != nil {
		return err
	}
	log.Info("provisioned", "servers", len(cfg.Servers), "shards", cfg.Shards, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
