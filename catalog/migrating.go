package catalog

import "github.com/shardkit/shardkit/internal/catalogmove"

// ErrProvisionRunning reports a move refused because a migration or a
// provisioning run holds the catalog (Tx.LockProvision): the move's target
// would be created from per-shard SQL the run is changing. Wait for the
// run to end, then start the move.
var ErrProvisionRunning = catalogmove.ErrProvisionRunning
