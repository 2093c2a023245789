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
//
// The whole read is one batch, one round trip: a repeatable-read
// transaction that reads the version, the servers and the changed rows.
// At a flip every process reloads at once, so each round trip saved is
// saved a thousand times on the catalog and its pooler.
func (c *Catalog) LoadChanges(ctx context.Context, since *router.Snapshot) (*router.Snapshot, error) {
	if since == nil {
		return c.Load(ctx)
	}
	snap, err := c.loadChanges(ctx, since)
	if errors.Is(err, errEpochChanged) {
		if snap, err = c.Load(ctx); err == nil && snap.Version < since.Version {
			return nil, &RegressedError{Had: since.Version, Now: snap.Version, Epoch: true}
		}
		return snap, err
	}
	if errors.Is(err, ErrCatalogRegressed) {
		return nil, err
	}
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

func (c *Catalog) loadChanges(ctx context.Context, since *router.Snapshot) (snap *router.Snapshot, err error) {
	qs, err := c.serverQueries(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue(sqlBeginSnapshot)
	b.Queue(sqlMapVersionNow)
	b.Queue(sqlCatalogEpoch)
	b.Queue(qs.servers)
	b.Queue(qs.primaries)
	b.Queue(sqlPlacementsSince, since.Version)
	b.Queue(`COMMIT`)
	br := c.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			snap, err = nil, cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	var version int64
	if err := br.QueryRow().Scan(&version); err != nil {
		return nil, err
	}
	var epoch string
	if err := br.QueryRow().Scan(&epoch); err != nil {
		return nil, err
	}
	servers, err := readServers(ctx, batchQuerier{br}, qs)
	if err != nil {
		return nil, err
	}
	if err := withPrimaries(ctx, batchQuerier{br}, qs, servers); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	changed, err := pgx.CollectRows(rows, scanPlacement)
	if err != nil {
		return nil, err
	}
	if since.CatalogEpoch != "" && epoch != since.CatalogEpoch {
		// Another history: its version numbers say nothing about which
		// rows changed since, so the whole map is read (after the batch).
		return nil, errEpochChanged
	}
	if version < since.Version {
		return nil, &RegressedError{Had: since.Version, Now: version}
	}
	if version == since.Version {
		return since, nil
	}
	snap, err = since.Next(version, servers, changed)
	if err != nil {
		return nil, fmt.Errorf("shardkit: %w", err)
	}
	return snap, nil
}

// sqlBeginSnapshot opens the read-only, repeatable-read transaction of a
// batched read: every statement after it sees one snapshot.
const sqlBeginSnapshot = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`

// batchQuerier reads the next result of a batch as readServers' Query.
type batchQuerier struct{ br pgx.BatchResults }

func (q batchQuerier) Query(context.Context, string, ...any) (pgx.Rows, error) { return q.br.Query() }

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
	return pgx.CollectRows(rows, scanPlacement)
}

// scanPlacement reads one shard-map row.
func scanPlacement(r pgx.CollectableRow) (router.Placement, error) {
	var p router.Placement
	var state string
	err := r.Scan(&p.Shard, &p.Server, &state)
	p.State = router.ShardState(state)
	p.Schema = router.SchemaName(p.Shard)
	return p, err
}

var _ router.VersionSource = (*Catalog)(nil)
