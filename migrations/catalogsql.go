package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
)

// sqlStepApplied asks a shard server whether any schema applied a step.
const sqlStepApplied = `SELECT EXISTS (SELECT 1 FROM shardkit.shard_migrations WHERE version = $1 AND part = $2)`

// appliedAnywhere reports whether any shard schema on any server of the
// catalog has applied step k. A server that cannot be asked is an error:
// without its answer a changed file cannot be accepted.
func appliedAnywhere(ctx context.Context, cat *catalog.Catalog, k stepKey) (bool, error) {
	snap, err := cat.Load(ctx)
	if errors.Is(err, catalog.ErrNoCatalog) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, srv := range snap.Servers() {
		conn, err := connect(ctx, srv.Name, srv.Admin())
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

func byStep(files []catalog.ShardSQL, err error) (map[stepKey]recorded, error) {
	if err != nil {
		return nil, err
	}
	out := make(map[stepKey]recorded, len(files))
	for _, f := range files {
		out[stepKey{f.Version, Part(f.Part)}] = recorded{name: f.Name, body: f.Body, sum: f.SHA256}
	}
	return out, nil
}

// recordVersions records the application's files in the catalog. A file
// whose content differs from what was recorded for its version replaces the
// record if no shard schema has applied that version yet (a migration that
// failed everywhere can be fixed in place), and is refused otherwise.
func recordVersions(ctx context.Context, tx *catalog.Tx, cat *catalog.Catalog, versions []Version) error {
	have, err := byStep(tx.ShardSQL(ctx))
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
					if err := tx.ReplaceShardSQL(ctx, v.record(p)); err != nil {
						return err
					}
					continue
				}
				return fmt.Errorf("shardkit: %w: %s differs from the %s applied as version %d; "+
					"never edit an applied migration: undo the edit and add a new NNNN_name.sql",
					ErrMigrationChanged, v.fileName(p), r.name, v.Number)
			}
			if err := tx.AddShardSQL(ctx, v.record(p)); err != nil {
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
func CatalogSQL(ctx context.Context, cat *catalog.Catalog) (fs.FS, error) {
	have, err := byStep(cat.ShardSQL(ctx))
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

// record is part p of v as the catalog records it.
func (v Version) record(p Part) catalog.ShardSQL {
	return catalog.ShardSQL{Version: v.Number, Part: string(p), Name: v.fileName(p), Body: v.sql(p), SHA256: v.Checksum(p)}
}
