package catalog

import (
	"errors"
	"fmt"
	"time"
)

// ErrCatalogRegressed reports a catalog whose shard-map version is older than
// a map a router already holds: the catalog lost committed changes (a failover
// to a standby that had not received them, a restore from a backup). The
// router keeps its map and installs none older; routers' maps may hold changes
// the catalog lost. It arrives as a *RegressedError. A process started afresh
// has no map to compare and takes the catalog's: find what the catalog lost
// (moves that had flipped: shardctl status against the shard schemas on the
// servers) and redo it before starting new processes.
var ErrCatalogRegressed = errors.New("the catalog's shard map is older than one already read from it")

// RegressedError is ErrCatalogRegressed with the versions.
type RegressedError struct {
	Had, Now int64 // the router's map version, the catalog's
	Epoch    bool  // the catalog's history changed too (it failed over or was restored)
}

func (e *RegressedError) Error() string {
	why := "its version went back"
	if e.Epoch {
		why = "it failed over or was restored and lost commits"
	}
	return fmt.Sprintf("shardkit: the catalog's shard map is at version %d, older than the version %d already read from it: %s; "+
		"find the lost map changes (moves' journals, shardctl status) and make the catalog hold them again, then restart the routers", e.Now, e.Had, why)
}

// Unwrap returns ErrCatalogRegressed.
func (e *RegressedError) Unwrap() error { return ErrCatalogRegressed }

// errEpochChanged is loadChanges' report of a catalog of another history
// than the snapshot's: LoadChanges then reads the whole map.
var errEpochChanged = errors.New("the catalog's history changed")

// sqlCatalogEpoch identifies the catalog's history: its server's system
// identifier and, on a primary, the timeline it writes (from its WAL
// file's name), which a promotion or a point-in-time restore changes.
const sqlCatalogEpoch = `SELECT ` + epochExpr

// epochExpr is sqlCatalogEpoch's value (catalog version 14 records it
// for the slot leases with the same expression).
const epochExpr = `(SELECT system_identifier FROM pg_control_system())::text || ':' ||
	CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`

// ErrLeasesHeldBack reports a catalog that grants no ID slot lease for
// now because its history changed (it failed over or was restored): a
// lease it lost may still have a live holder, which stops once its
// renewal fails, at the latest one lease TTL after the change. It
// arrives as a *HeldBackError, which also matches ErrNoFreeSlot: new
// rows take their keys from the database's next_id() meanwhile, and a
// generator's own retries get a lease once the hold ends.
var ErrLeasesHeldBack = errors.New("the catalog holds ID slot leases back after a change of its history")

// HeldBackError is ErrLeasesHeldBack with the end of the hold.
type HeldBackError struct {
	Until time.Time // on the catalog's clock
}

func (e *HeldBackError) Error() string {
	return fmt.Sprintf("shardkit: the catalog failed over or was restored, so leases it granted may be lost while their holders still issue IDs: "+
		"it grants no ID slot until %s (one lease TTL after the change, when every such holder has stopped); "+
		"new rows take their keys from the database's next_id() meanwhile; lease again after that", e.Until.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrLeasesHeldBack and ErrNoFreeSlot.
func (e *HeldBackError) Unwrap() []error { return []error{ErrLeasesHeldBack, ErrNoFreeSlot} }
