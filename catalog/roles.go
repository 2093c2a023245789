package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/approle"
)

// DefaultAppRole is the application's group role unless provisioning
// names another (Config.AppRole).
const DefaultAppRole = "shardkit_app"

// ErrBadRole reports a role name shardkit does not accept: lower case letters,
// digits and underscores, not starting with a digit, at most 63. Pick a name
// of that form.
var ErrBadRole = errors.New("invalid role name")

// validateRole checks a role name (Config.AppRole).
func validateRole(role string) error {
	if !approle.Valid(role) {
		return fmt.Errorf("shardkit: %w: %q; use lower case letters, digits and underscores, starting with a letter", ErrBadRole, role)
	}
	return nil
}

// The catalog's grants to the application role: it reads the
// configuration, the map and the servers but for their admin DSNs, and
// takes, renews and releases its ID slot leases (lease.go writes those
// rows). It writes nothing else: no map, no server, no move.
const (
	sqlGrantCatalog = `REVOKE ALL ON ALL TABLES IN SCHEMA shardkit FROM %[1]s;
GRANT USAGE ON SCHEMA shardkit TO %[1]s;
GRANT SELECT ON shardkit.config, shardkit.shard_map, shardkit.catalog_version, shardkit.servers_app TO %[1]s;
GRANT SELECT, INSERT, UPDATE ON shardkit.slot_leases TO %[1]s;
GRANT SELECT, UPDATE ON shardkit.lease_epoch TO %[1]s`
	// sqlServerColumns lists the servers' columns the application reads:
	// all but the admin DSN.
	sqlServerColumns = `SELECT attname FROM pg_attribute
WHERE attrelid = 'shardkit.servers'::regclass AND attnum > 0 AND NOT attisdropped AND attname <> 'admin_dsn'
ORDER BY attnum`
)

// GrantApp creates the application role on the catalog's cluster if it is
// missing and grants it what an application process needs on the catalog
// (and revokes what it held beyond that). The caller is the operator: the
// owner of the catalog's objects.
func (c *Catalog) GrantApp(ctx context.Context, role string) error {
	if err := validateRole(role); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, approle.EnsureSQL(role)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sqlServerColumns)
		if err != nil {
			return err
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		sql := fmt.Sprintf(sqlGrantCatalog, role)
		if len(cols) > 0 {
			quoted := make([]string, len(cols))
			for i, col := range cols {
				quoted[i] = pgx.Identifier{col}.Sanitize()
			}
			sql += ";\nGRANT SELECT (" + strings.Join(quoted, ", ") + ") ON shardkit.servers TO " + role
		}
		_, err = tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err != nil {
		return fmt.Errorf("shardkit: grant the application role %s on the catalog: %w", role, err)
	}
	return nil
}

// Refusals tries, on the catalog's own connections, the two things the
// application role may not do: read a server's admin DSN, and write the
// shard map (in a transaction that is rolled back, so that nothing
// changes even where the write is allowed). Each error is nil where the
// catalog's role may do it, and a 42501 (insufficient_privilege) where it
// is refused. It is for a deployment's own check that its app processes
// hold no more than the application role, as the photo demo prints it.
func (c *Catalog) Refusals(ctx context.Context) (readAdminDSN, writeShardMap error) {
	var admin *string
	readAdminDSN = c.pool.QueryRow(ctx, `SELECT admin_dsn FROM shardkit.servers LIMIT 1`).Scan(&admin)
	if errors.Is(readAdminDSN, pgx.ErrNoRows) {
		readAdminDSN = nil
	}
	writeShardMap = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE shardkit.shard_map SET server = server WHERE shard = 0`); err != nil {
			return err
		}
		return errRolledBack
	})
	if errors.Is(writeShardMap, errRolledBack) {
		writeShardMap = nil
	}
	return readAdminDSN, writeShardMap
}

// errRolledBack ends Refusals' transaction with a rollback.
var errRolledBack = errors.New("rolled back")
