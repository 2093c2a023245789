package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// ErrNoIdentity reports a catalog made before catalog version 13, which
// has no identity to tie the maps a relay serves to it.
var ErrNoIdentity = errors.New("the catalog has no identity (made before catalog version 13): migrate it (Catalog.Migrate)")

// Stamp is what a client of a relay checks a map against: the catalog's
// identity and, read at one instant, its map version and its servers.
type Stamp struct {
	// ID is the catalog's identity: a random id made when the catalog was
	// created or migrated to version 13, kept by failovers and restores.
	ID string
	// Epoch is the catalog's history (router.Snapshot.CatalogEpoch).
	Epoch string
	// Version is the newest committed map version.
	Version int64
	// Servers are the servers as an application reads them (no admin
	// DSN), by name.
	Servers []router.Server
}

const sqlStampHead = `SELECT catalog_id::text, map_version, (` + sqlCatalogEpoch + `) FROM shardkit.config`

// Stamp reads the catalog's identity, map version and servers in one
// read-only, repeatable-read transaction, with the application's
// privileges. A catalog that lacks an identity returns ErrNoIdentity.
func (c *Catalog) Stamp(ctx context.Context) (Stamp, error) {
	var st Stamp
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlStampHead).Scan(&st.ID, &st.Version, &st.Epoch); err != nil {
			return err
		}
		qs, err := c.serverQueries(ctx, tx)
		if err != nil {
			return err
		}
		if st.Servers, err = readServers(ctx, tx, qs); err != nil {
			return err
		}
		return withPrimaries(ctx, tx, qs, st.Servers)
	})
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return st, nil
	case errors.As(err, &pe) && pe.Code == "42703": // undefined_column: catalog_id
		return Stamp{}, fmt.Errorf("shardkit: %w", ErrNoIdentity)
	case errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err):
		return Stamp{}, fmt.Errorf("shardkit: %w", ErrNoCatalog)
	}
	return Stamp{}, fmt.Errorf("shardkit: read the catalog's identity: %w", err)
}
