package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/router"
)

// sqlMapPlace places shard $1 on server $2 in state $3.
const sqlMapPlace = `UPDATE shardkit.shard_map SET server = $2, state = $3, fence_until = NULL, version = $4, updated_at = now()
	WHERE shard = $1`

// PlaceShard places a shard on server in state st in a new map version,
// which it returns, whatever its row said before. It moves no data: it is
// for tests and for repairs by hand; shard moves go through package
// rebalance.
func (c *Catalog) PlaceShard(ctx context.Context, shard int, server string, st router.ShardState) (int64, error) {
	v, err := catalogmove.ChangeMap(ctx, c.pool, func(tx pgx.Tx, v int64) error {
		tag, err := tx.Exec(ctx, sqlMapPlace, shard, server, string(st), v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("shardkit: %w: shard %d", router.ErrUnknownShard, shard)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("shardkit: change shard map: %w", err)
	}
	return v, nil
}

// Placement reads where one shard is, and in which state, from the
// catalog itself (not a snapshot).
func (c *Catalog) Placement(ctx context.Context, shard int) (server string, st router.ShardState, err error) {
	return catalogmove.Placement(ctx, c.pool, shard)
}
