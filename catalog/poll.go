package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// Statements of a polling router (router.WatchOptions.Poll). The version
// check is one row of one table, read through the catalog's pool; the
// reload after it reads the servers (a few rows) and only the shard-map
// rows of later versions: every map change stamps the rows it changes
// with the version it makes, in the same transaction.
const (
	sqlMapVersionNow   = `SELECT map_version FROM shardkit.config`
	sqlPlacementsAll   = `SELECT shard, server, state FROM shardkit.shard_map ORDER BY shard`
	sqlPlacementsSince = `SELECT shard, server, state FROM shardkit.shard_map WHERE version > $1 ORDER BY shard`
)

// MapVersion returns the newest committed shard-map version: the cheap
// check a polling router makes. It is part of the router.VersionSource
// interface.
func (c *Catalog) MapVersion(ctx context.Context) (int64, error) {
	var v int64
	err := c.pool.QueryRow(ctx, sqlMapVersionNow).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
		return 0, fmt.Errorf("shardkit: %w", ErrNoCatalog)
	}
	if err != nil {
		return 0, fmt.Errorf("shardkit: read the map version: %w", err)
	}
	return v, nil
}

// LoadChanges reads the shard map as Load does, as one consistent
// snapshot, but only the shard-map rows changed after since.Version, and
// applies them to since (router.Snapshot.Next). since nil is Load. It is
// part of the router.VersionSource interface.
func (c *Catalog) LoadChanges(ctx context.Context, since *router.Snapshot) (*router.Snapshot, error) {
	if since == nil {
		return c.Load(ctx)
	}
	var snap *router.Snapshot
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var version int64
		if err := tx.QueryRow(ctx, sqlMapVersionNow).Scan(&version); err != nil {
			return err
		}
		if version <= since.Version {
			snap = since
			return nil
		}
		servers, err := readServers(ctx, tx)
		if err != nil {
			return err
		}
		changed, err := readPlacements(ctx, tx, since.Version)
		if err != nil {
			return err
		}
		snap, err = since.Next(version, servers, changed)
		if err != nil {
			return fmt.Errorf("shardkit: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, router.ErrBadCatalog) {
			return nil, err
		}
		if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
			return nil, fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return nil, fmt.Errorf("shardkit: load shard-map changes: %w", err)
	}
	return snap, nil
}

// readPlacements reads the shard-map rows of versions after since, by
// shard; since < 0 reads every row.
func readPlacements(ctx context.Context, tx pgx.Tx, since int64) ([]router.Placement, error) {
	sql, args := sqlPlacementsAll, []any(nil)
	if since >= 0 {
		sql, args = sqlPlacementsSince, []any{since}
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (router.Placement, error) {
		var p router.Placement
		var state string
		err := r.Scan(&p.Shard, &p.Server, &state)
		p.State = router.ShardState(state)
		p.Schema = router.SchemaName(p.Shard)
		return p, err
	})
}

var _ router.VersionSource = (*Catalog)(nil)
