package rebalance

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

const (
	sqlMapState = `UPDATE shardkit.shard_map SET state = $3, version = $4, updated_at = now()
		WHERE shard = $1 AND server = $2`
	sqlMapFlip = `UPDATE shardkit.shard_map SET server = $3, state = 'active', version = $4, updated_at = now()
		WHERE shard = $1 AND server IN ($2, $3)`
)

// setMapState sets the state of a shard placed on server and bumps the map
// version (routers are notified at commit). A shard no longer on server is
// left alone.
func setMapState(ctx context.Context, cat *router.Catalog, shard int, server string, st router.ShardState) error {
	_, err := cat.ChangeMap(ctx, func(ctx context.Context, tx pgx.Tx, v int64) error {
		_, err := tx.Exec(ctx, sqlMapState, shard, server, string(st), v)
		return err
	})
	if err != nil {
		return fmt.Errorf("set shard %d %s: %w", shard, st, err)
	}
	return nil
}

// flipMap places the shard on to, active, in a new map version. Running it
// again is harmless.
func flipMap(ctx context.Context, cat *router.Catalog, shard int, from, to string) error {
	_, err := cat.ChangeMap(ctx, func(ctx context.Context, tx pgx.Tx, v int64) error {
		tag, err := tx.Exec(ctx, sqlMapFlip, shard, from, to, v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("shard %d is on neither %s nor %s", shard, from, to)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", shard, to, err)
	}
	return nil
}
