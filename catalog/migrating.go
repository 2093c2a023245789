package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrProvisionRunning reports a move refused because a migration or a
// provisioning run holds the catalog (LockProvision): the move's target
// would be created from per-shard SQL the run is changing. Wait for the
// run to end, then start the move.
var ErrProvisionRunning = errors.New("a migration or provisioning run is in progress")

// sqlProvisionBusy is true while a run holds the provisioning lock: the
// shared form is refused then, and released with its statement.
const sqlProvisionBusy = `SELECT NOT pg_try_advisory_xact_lock_shared(hashtext('shardkit.provision'))`

// ProvisionRunning reports whether a migration or provisioning run holds
// the catalog now.
func (c *Catalog) ProvisionRunning(ctx context.Context) (bool, error) {
	var busy bool
	if err := c.pool.QueryRow(ctx, sqlProvisionBusy).Scan(&busy); err != nil {
		return false, fmt.Errorf("shardkit: catalog: %w", err)
	}
	return busy, nil
}

// OpenMoves returns the unfinished moves (running, reversible, rolling
// back), oldest first, read in the transaction. Under LockProvision no move
// can be journalled until the transaction ends: CreateMove refuses with
// ErrProvisionRunning.
func (t *Tx) OpenMoves(ctx context.Context) ([]MoveRow, error) {
	rows, err := t.tx.Query(ctx, sqlOpenMoves)
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MoveRow, error) { return scanMove(r) })
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	return ms, nil
}
