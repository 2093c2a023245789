package catalogmove

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

// ErrNotPlaced reports a shard that is not where (or not in the state) a
// change expected it; the message says where it was looked for.
var ErrNotPlaced = errors.New("the shard is not placed as expected")

// Every change of the map bumps shardkit.config.map_version, whose row lock
// serialises map changes; the trigger on it notifies routers at commit.
const (
	sqlMapBumpReturning = `UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version`

	sqlMapFlip = `UPDATE shardkit.shard_map SET server = $3, state = 'active', version = $4, updated_at = now()
		WHERE shard = $1 AND server IN ($2, $3)`

	// sqlMapStateBump sets the state of shard $1 on server $2 to $3 in a
	// new map version, in one statement: the configuration row's lock is
	// held for the statement alone, not across round trips from the
	// client (a cutover's fence waits on it).
	sqlMapStateBump = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version)
	UPDATE shardkit.shard_map SET state = $3, fence_until = NULL, version = (SELECT map_version FROM v), updated_at = now()
	WHERE shard = $1 AND server = $2`

	// sqlMapStateIf sets shard $1 on server $2 from state $3 to state $4.
	sqlMapStateIf = `UPDATE shardkit.shard_map SET state = $4, fence_until = NULL, version = $5, updated_at = now()
	WHERE shard = $1 AND server = $2 AND state = $3`

	// sqlPlacement: where shard $1 is and in which state.
	sqlPlacement = `SELECT server, state FROM shardkit.shard_map WHERE shard = $1`
)

// UndefinedTable reports an error of a catalog that has no shardkit schema
// (or not that table): one never provisioned.
func UndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") // undefined_table, invalid_schema_name
}

// ChangeMap runs fn in a transaction on pool that bumps the map version,
// and returns the new version. A catalog never provisioned is
// router.ErrNoCatalog.
func ChangeMap(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx, version int64) error) (int64, error) {
	var v int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlMapBumpReturning).Scan(&v); err != nil {
			if UndefinedTable(err) {
				return router.ErrNoCatalog
			}
			return err
		}
		return fn(tx, v)
	})
	return v, err
}

// SetShardState sets the state of a shard placed on server in a new map
// version. A shard no longer on server is left alone (the version is
// bumped all the same).
func (c *Store) SetShardState(ctx context.Context, shard int, server string, st router.ShardState) error {
	if _, err := c.pool.Exec(ctx, sqlMapStateBump, shard, server, string(st)); err != nil {
		return fmt.Errorf("set shard %d %s: %w", shard, st, err)
	}
	return nil
}

// FlipShard places the shard, now on from or to, on to, active, in a new
// map version. Running it again is harmless.
func (c *Store) FlipShard(ctx context.Context, shard int, from, to string) error {
	_, err := ChangeMap(ctx, c.pool, func(tx pgx.Tx, v int64) error {
		tag, err := tx.Exec(ctx, sqlMapFlip, shard, from, to, v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: shard %d is on neither %s nor %s", ErrNotPlaced, shard, from, to)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", shard, to, err)
	}
	return nil
}

// ChangeShardState sets the shard, on server in state from, to state to
// in a new map version, which it returns. A shard not so placed changes
// nothing and is ErrNotPlaced.
func (c *Store) ChangeShardState(ctx context.Context, shard int, server string, from, to router.ShardState) (int64, error) {
	v, err := ChangeMap(ctx, c.pool, func(tx pgx.Tx, v int64) error {
		tag, err := tx.Exec(ctx, sqlMapStateIf, shard, server, string(from), string(to), v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: shard %d is not %s on %s", ErrNotPlaced, shard, from, server)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("shardkit: change shard map: %w", err)
	}
	return v, nil
}

// Placement is the catalog's placement of one shard, read on the catalog
// itself (not a snapshot): q is the catalog's pool or one of its
// connections.
func Placement(ctx context.Context, q rowQuerier, shard int) (string, router.ShardState, error) {
	var server, state string
	err := q.QueryRow(ctx, sqlPlacement, shard).Scan(&server, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", fmt.Errorf("shardkit: %w: shard %d", router.ErrUnknownShard, shard)
	}
	return server, router.ShardState(state), err
}

// Placement reads where one shard is, and in which state.
func (c *Store) Placement(ctx context.Context, shard int) (string, router.ShardState, error) {
	return Placement(ctx, c.pool, shard)
}
