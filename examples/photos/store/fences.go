package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/rebalance"
)

// FenceWatcher ends the fences of moves whose mover died inside a cutover
// (rebalance.Mover.WatchFences): without it, such a shard waits for an
// operator once its lease lapsed. Every instance of the service runs one;
// they are safe together.
type FenceWatcher struct{ mover *rebalance.Mover }

// FenceWatchInterval is how often the watcher looks for lapsed fences.
const FenceWatchInterval = time.Second

// NewFenceWatcher starts the fence watcher; the cleanup stops it.
func NewFenceWatcher(cat *catalog.Catalog, log *slog.Logger) (*FenceWatcher, func(), error) {
	mv, err := rebalance.New(rebalance.Config{Catalog: cat, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mv.WatchFences(ctx, FenceWatchInterval)
	}()
	return &FenceWatcher{mover: mv}, func() { cancel(); <-done; mv.Close() }, nil
}
