//go:build wireinject

package app

import (
	"context"
	"log/slog"

	"github.com/google/wire"

	"github.com/shardkit/shardkit/examples/photos/api"
	"github.com/shardkit/shardkit/examples/photos/metrics"
	"github.com/shardkit/shardkit/examples/photos/store"
)

// Initialize assembles the service from its configuration. The cleanup
// closes everything Initialize opened, in reverse order.
func Initialize(ctx context.Context, cfg Config, log *slog.Logger) (*App, func(), error) {
	wire.Build(
		wire.FieldsOf(new(Config), "Addr", "Catalog", "FenceWait", "AdminToken"),
		store.ProviderSet,
		metrics.ProviderSet,
		api.ProviderSet,
		wire.Struct(new(App), "*"),
	)
	return nil, nil, nil
}
