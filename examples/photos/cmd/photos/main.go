// Command photos is the photo-sharing example service: a JSON API over
// GORM and the shardkit plugin, an admin page at /admin, /healthz and
// Prometheus /metrics.
//
//	SHARDKIT_CATALOG=postgres://…/catalog go run ./examples/photos/cmd/photos -addr :8080
//
// With -provision (or PHOTOS_PROVISION=true) and -servers name=DSN,… (or
// SHARDKIT_SERVERS) it first creates the catalog and the shard schemas;
// with -provision-only it stops there. Servers new to an existing catalog
// are registered empty, ready for `shardctl rebalance`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shardkit/shardkit/examples/photos/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "photos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := app.ParseConfig("photos", os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	if cfg.Provision {
		if err := app.Provision(ctx, cfg, log); err != nil {
			return err
		}
		if cfg.ProvisionOnly {
			return nil
		}
	}
	a, cleanup, err := app.Initialize(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return a.Serve(ctx)
}
