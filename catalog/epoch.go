package catalog

import (
	"errors"
	"fmt"
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
const sqlCatalogEpoch = `SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||
	CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`
