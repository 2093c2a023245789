package catalogmove

import (
	"context"
	"errors"
	"fmt"
)

// ErrProvisionRunning reports a move refused because a migration or a
// provisioning run holds the catalog (catalog.Tx.LockProvision). Package
// catalog exports it as catalog.ErrProvisionRunning.
var ErrProvisionRunning = errors.New("a migration or provisioning run is in progress")

// sqlProvisionBusy is true while a run holds the provisioning lock: the
// shared form is refused then, and released with its statement.
const sqlProvisionBusy = `SELECT NOT pg_try_advisory_xact_lock_shared(hashtext('shardkit.provision'))`

// ProvisionRunning reports whether a migration or provisioning run holds
// the catalog now.
func (c *Store) ProvisionRunning(ctx context.Context) (bool, error) {
	var busy bool
	if err := c.pool.QueryRow(ctx, sqlProvisionBusy).Scan(&busy); err != nil {
		return false, fmt.Errorf("shardkit: catalog: %w", err)
	}
	return busy, nil
}
