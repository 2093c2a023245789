package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// ErrServerBusy reports a server that FenceServer does not fence: one of
// its shards is moving or fenced by a move, whose cutover owns that state.
var ErrServerBusy = errors.New("a shard of the server is under a move")

// ErrNoSwitchoverLease reports a catalog made before version 16, which
// cannot mark a switchover's fence: plugin writes would wait on it only
// for plugin.Config.FenceWait. Migrate it (Catalog.Migrate), then run the
// switchover again.
var ErrNoSwitchoverLease = errors.New("the catalog cannot mark a switchover's fence (made before catalog version 16): migrate it first (Catalog.Migrate)")

// Statements of a server's switchover fence. Each runs after the map
// version was bumped, and stamps the rows it changes with that version.
const (
	sqlServerBusy  = `SELECT count(*) FROM shardkit.shard_map WHERE server = $1 AND state <> 'active'`
	sqlServerFence = `UPDATE shardkit.shard_map SET state = 'fenced',
	fence_until = now() + $2::float8 * interval '1 millisecond',
	switchover_until = now() + $2::float8 * interval '1 millisecond',
	version = (SELECT map_version FROM shardkit.config), updated_at = now()
	WHERE server = $1 AND state = 'active'`
	sqlServerUnfence = `UPDATE shardkit.shard_map SET state = 'active', fence_until = NULL, switchover_until = NULL,
	version = (SELECT map_version FROM shardkit.config), updated_at = now()
	WHERE server = $1 AND state = 'fenced'`
	// sqlSwitchoverLease is what is left of the lease of a switchover's
	// fence on shard $1: none for a shard that is not fenced, or fenced
	// by a move (which sets fence_until alone).
	sqlSwitchoverLease = `SELECT extract(epoch FROM switchover_until - now())::float8 FROM shardkit.shard_map
	WHERE shard = $1 AND state = 'fenced' AND switchover_until = fence_until`
	sqlServerKnown = `SELECT EXISTS (SELECT 1 FROM shardkit.servers WHERE name = $1)`
)

// FenceServer fences every shard of server name in a new map version, for
// a switchover of its primary: plugin writes to them wait until
// UnfenceServer, for at most the lease (see SwitchoverLease); reads go
// on. The catalog records the lease on each row (fence_until, which
// status shows, and switchover_until, which marks the fence a
// switchover's).
// It returns how many shards it fenced, and refuses with ErrServerBusy
// when a shard of the server is moving or fenced already.
func (c *Catalog) FenceServer(ctx context.Context, name string, lease time.Duration) (int, error) {
	var n int64
	err := c.Update(ctx, func(ctx context.Context, tx *Tx) error {
		if err := tx.BumpMapVersion(ctx); err != nil {
			if isUndefinedTable(err) {
				return fmt.Errorf("shardkit: %w", ErrNoCatalog)
			}
			return err
		}
		if err := tx.knownServer(ctx, name); err != nil {
			return err
		}
		var busy int
		if err := tx.tx.QueryRow(ctx, sqlServerBusy, name).Scan(&busy); err != nil {
			return err
		}
		if busy > 0 {
			return fmt.Errorf("shardkit: server %q: %w (%d shards not active): finish or roll back the move first", name, ErrServerBusy, busy)
		}
		tag, err := tx.tx.Exec(ctx, sqlServerFence, name, float64(lease.Milliseconds()))
		if isUndefinedColumn(err) {
			return fmt.Errorf("shardkit: server %q: %w", name, ErrNoSwitchoverLease)
		}
		n = tag.RowsAffected()
		return err
	})
	return int(n), err
}

// SwitchoverLease returns what is left of the lease of the fence a
// switchover (FenceServer) holds on shard, on the catalog's clock: 0 when
// the shard is not fenced, is fenced by a move, or the lease lapsed. The
// plugin holds a write on such a fence that long, past
// plugin.Config.FenceWait. A catalog before version 16 records no
// switchover's fence: 0.
func (c *Catalog) SwitchoverLease(ctx context.Context, shard int) (time.Duration, error) {
	var secs float64
	err := c.pool.QueryRow(ctx, sqlSwitchoverLease, shard).Scan(&secs)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedColumn(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("shardkit: read the lease of shard %d's fence: %w", shard, err)
	case secs <= 0:
		return 0, nil
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// UnfenceServer ends FenceServer's fence on server name in a new map
// version. With rec recorded, the same version records rec as the
// server's primary (Tx.RecordPrimary), so that no router sees the shards
// writable under the old record once the primary changed. It returns how
// many shards it unfenced.
func (c *Catalog) UnfenceServer(ctx context.Context, name string, rec router.Primary) (int, error) {
	var n int64
	err := c.Update(ctx, func(ctx context.Context, tx *Tx) error {
		if rec.Recorded() {
			if _, err := tx.RecordPrimary(ctx, name, rec); err != nil {
				return err
			}
		} else {
			if err := tx.BumpMapVersion(ctx); err != nil {
				return err
			}
			if err := tx.knownServer(ctx, name); err != nil {
				return err
			}
		}
		tag, err := tx.tx.Exec(ctx, sqlServerUnfence, name)
		n = tag.RowsAffected()
		return err
	})
	return int(n), err
}

// knownServer refuses a server the catalog does not have.
func (t *Tx) knownServer(ctx context.Context, name string) error {
	var ok bool
	if err := t.tx.QueryRow(ctx, sqlServerKnown, name).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("shardkit: %w: %q", router.ErrUnknownServer, name)
	}
	return nil
}
