package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// Statements on the catalog's record of per-shard SQL (catalog version 3).
const (
	sqlShardSQLAll = `SELECT version, part, name, body, sha256 FROM shardkit.shard_sql ORDER BY version, part`
	sqlShardSQLAdd = `INSERT INTO shardkit.shard_sql (version, part, name, body, sha256) VALUES ($1, $2, $3, $4, $5)`
	sqlShardSQLSet = `UPDATE shardkit.shard_sql SET name = $3, body = $4, sha256 = $5, recorded_at = now()
WHERE version = $1 AND part = $2`
	sqlStepApplied = `SELECT EXISTS (SELECT 1 FROM shardkit.shard_migrations WHERE version = $1 AND part = $2)`
)

// appliedAnywhere reports whether any shard schema on any server of the
// catalog has applied step k. A server that cannot be asked is an error:
// without its answer a changed file cannot be accepted.
func appliedAnywhere(ctx context.Context, cat *router.Catalog, k stepKey) (bool, error) {
	snap, err := cat.Load(ctx)
	if errors.Is(err, router.ErrNoCatalog) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, srv := range snap.Servers() {
		conn, err := connect(ctx, srv.Name, srv.DSN)
		if err != nil {
			return false, err
		}
		var used bool
		err = conn.QueryRow(ctx, sqlStepApplied, k.version, string(k.part)).Scan(&used)
		_ = conn.Close(ctx)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
			continue // shardkit not installed there yet
		}
		if err != nil {
			return false, &ServerError{Server: srv.Name, Err: err}
		}
		if used {
			return true, nil
		}
	}
	return false, nil
}

type recorded struct {
	name, body, sum string
}

func readRecorded(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[stepKey]recorded, error) {
	rows, err := q.Query(ctx, sqlShardSQLAll)
	if err != nil {
		return nil, err
	}
	out := map[stepKey]recorded{}
	var v int
	var part string
	var r recorded
	_, err = pgx.ForEachRow(rows, []any{&v, &part, &r.name, &r.body, &r.sum}, func() error {
		out[stepKey{v, Part(part)}] = r
		return nil
	})
	return out, err
}

// recordVersions records the application's files in the catalog. A file
// whose content differs from what was recorded for its version replaces the
// record if no shard schema has applied that version yet (a migration that
// failed everywhere can be fixed in place), and is refused otherwise.
func recordVersions(ctx context.Context, tx pgx.Tx, cat *router.Catalog, versions []Version) error {
	have, err := readRecorded(ctx, tx)
	if err != nil {
		return err
	}
	newest := 0
	for k := range have {
		newest = max(newest, k.version)
	}
	for _, v := range versions {
		if _, ok := have[stepKey{v.Number, PartTables}]; !ok && v.Number < newest {
			return fmt.Errorf("shardkit: %w: %s is new but version %d is already applied; renumber it above %d",
				ErrMigrationOrder, v.Name, newest, newest)
		}
		for _, p := range []Part{PartTables, PartIndexes} {
			if v.sql(p) == "" {
				continue
			}
			k := stepKey{v.Number, p}
			if r, ok := have[k]; ok {
				if r.sum == v.Checksum(p) && r.name == v.fileName(p) {
					continue
				}
				used, err := appliedAnywhere(ctx, cat, k)
				if err != nil {
					return err
				}
				if !used {
					if _, err := tx.Exec(ctx, sqlShardSQLSet, v.Number, string(p), v.fileName(p), v.sql(p), v.Checksum(p)); err != nil {
						return err
					}
					continue
				}
				return fmt.Errorf("shardkit: %w: %s differs from the %s applied as version %d; "+
					"never edit an applied migration: undo the edit and add a new NNNN_name.sql",
					ErrMigrationChanged, v.fileName(p), r.name, v.Number)
			}
			if _, err := tx.Exec(ctx, sqlShardSQLAdd, v.Number, string(p), v.fileName(p), v.sql(p), v.Checksum(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// CatalogSQL returns the application's per-shard SQL files as recorded in
// the catalog by Provision and Migrate, as a file system for ApplyShard:
// the shard mover creates a target schema from it without needing the
// application's files. It returns nil (no files) when none are recorded.
func CatalogSQL(ctx context.Context, cat *router.Catalog) (fs.FS, error) {
	have, err := readRecorded(ctx, cat.Pool())
	if err != nil {
		return nil, fmt.Errorf("shardkit: read per-shard SQL from the catalog: %w", err)
	}
	if len(have) == 0 {
		return nil, nil
	}
	out := fstest.MapFS{}
	for _, r := range have {
		out[r.name] = &fstest.MapFile{Data: []byte(r.body), Mode: 0o444}
	}
	return out, nil
}
