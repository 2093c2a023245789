package migrations

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/shardschema"
)

// sqlStepApplied asks a shard server whether any schema applied a step.
const sqlStepApplied = `SELECT EXISTS (SELECT 1 FROM shardkit.shard_migrations WHERE version = $1 AND part = $2)`

// appliedAnywhere reports whether any shard schema on any server of the
// catalog has applied step k. A server that cannot be asked is an error:
// without its answer a changed file cannot be accepted.
func appliedAnywhere(ctx context.Context, cat *catalog.Catalog, k stepKey) (bool, error) {
	snap, err := cat.Operator().Load(ctx)
	if errors.Is(err, catalog.ErrNoCatalog) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, srv := range snap.Servers() {
		conn, err := connectServer(ctx, srv)
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

// stepKey names one part of one version: what the catalog records a
// file by.
type stepKey struct {
	version int
	part    shardschema.Part
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
		out[stepKey{f.Version, shardschema.Part(f.Part)}] = recorded{name: f.Name, body: f.Body, sum: f.SHA256}
	}
	return out, nil
}

// recordVersions records the application's files in the catalog. A file
// whose content differs from what was recorded for its version replaces the
// record if no shard schema has applied that version yet (a migration that
// failed everywhere can be fixed in place), and is refused otherwise.
func recordVersions(ctx context.Context, tx *catalog.Tx, cat *catalog.Catalog, versions []Version) error {
	plan, err := planRun(ctx, tx, cat, versions, false)
	if err != nil {
		return err
	}
	return writeChanges(ctx, tx, plan)
}

// runPlan is what one Migrate applies and then records.
type runPlan struct {
	versions []Version          // the catalog's record with the run's files laid over it
	changes  []catalog.ShardSQL // files to record once every schema applied them
	replace  map[stepKey]bool   // changes that replace a record (else they add one)
}

// planRun checks the run's files against the catalog's record, as
// recordVersions does, and against what failed runs left on the servers
// (leftovers), without writing anything. files is nil when Migrate applies
// the catalog's record only.
func planRun(ctx context.Context, tx *catalog.Tx, cat *catalog.Catalog, files []Version, given bool) (runPlan, error) {
	have, err := byStep(tx.ShardSQL(ctx))
	if err != nil {
		return runPlan{}, err
	}
	plan := runPlan{replace: map[stepKey]bool{}}
	newest := 0
	for k := range have {
		newest = max(newest, k.version)
	}
	for _, v := range files {
		if _, ok := have[stepKey{v.Number, shardschema.PartTables}]; !ok && v.Number < newest {
			return runPlan{}, fmt.Errorf("shardkit: %w: %s is new but version %d is already applied; renumber it above %d",
				ErrMigrationOrder, v.Name, newest, newest)
		}
		for _, p := range []shardschema.Part{shardschema.PartTables, shardschema.PartIndexes} {
			if shardschema.PartSQL(v, p) == "" {
				continue
			}
			k := stepKey{v.Number, p}
			if r, ok := have[k]; ok {
				if r.sum == shardschema.Checksum(v, p) && r.name == shardschema.FileName(v, p) {
					continue
				}
				used, err := appliedAnywhere(ctx, cat, k)
				if err != nil {
					return runPlan{}, err
				}
				if used {
					return runPlan{}, fmt.Errorf("shardkit: %w: %s differs from the %s applied as version %d; "+
						"never edit an applied migration: undo the edit and add a new NNNN_name.sql",
						ErrMigrationChanged, shardschema.FileName(v, p), r.name, v.Number)
				}
				plan.replace[k] = true
			}
			plan.changes = append(plan.changes, record(v, p))
		}
	}
	if given {
		if err := checkLeftovers(ctx, cat, have, files); err != nil {
			return runPlan{}, err
		}
	}
	byNumber := map[int]Version{}
	if len(have) > 0 { // ReadVersions refuses a file system without files
		recordFS, err := ReadVersions(filesOf(have))
		if err != nil {
			return runPlan{}, err
		}
		for _, v := range recordFS {
			byNumber[v.Number] = v
		}
	}
	for _, v := range files {
		byNumber[v.Number] = v
	}
	for _, v := range byNumber {
		plan.versions = append(plan.versions, v)
	}
	sort.Slice(plan.versions, func(i, j int) bool { return plan.versions[i].Number < plan.versions[j].Number })
	return plan, nil
}

// writeChanges records the run's files, once every schema applied them.
func writeChanges(ctx context.Context, tx *catalog.Tx, plan runPlan) error {
	for _, f := range plan.changes {
		var err error
		if plan.replace[stepKey{f.Version, shardschema.Part(f.Part)}] {
			err = tx.ReplaceShardSQL(ctx, f)
		} else {
			err = tx.AddShardSQL(ctx, f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sqlLeftovers lists the application steps a server's schemas applied,
// with the checksum of what they ran (NULL when unknown: applied before
// checksums were recorded, or restored from a backup).
const sqlLeftovers = `SELECT version, part, name, sha256, count(*), min(schema_name) FROM shardkit.shard_migrations
WHERE version > 0 GROUP BY version, part, name, sha256`

// checkLeftovers refuses a run that would leave schemas different: a step
// some schemas applied (in a Migrate that then failed) that the catalog
// does not record must be among the run's files, with the content those
// schemas ran. Every server must answer.
func checkLeftovers(ctx context.Context, cat *catalog.Catalog, have map[stepKey]recorded, files []Version) error {
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return err
	}
	file := map[stepKey]Version{}
	for _, v := range files {
		file[stepKey{v.Number, shardschema.PartTables}] = v
		if v.Indexes != "" {
			file[stepKey{v.Number, shardschema.PartIndexes}] = v
		}
	}
	for _, srv := range snap.Servers() {
		if srv.State == "retired" {
			continue
		}
		conn, err := connectServer(ctx, srv)
		if err != nil {
			return err
		}
		rows, err := conn.Query(ctx, sqlLeftovers)
		var k stepKey
		var part, name, first string
		var sum *string
		var n int
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&k.version, &part, &name, &sum, &n, &first}, func() error {
				k.part = shardschema.Part(part)
				if _, ok := have[k]; ok {
					return nil
				}
				v, ok := file[k]
				if !ok {
					return fmt.Errorf("shardkit: %w: %s (version %d) was applied to %d shard schemas of server %q (%s first) "+
						"by a migrate that failed, and is not among the files now; put it back as it was and run migrate again to finish it",
						ErrMigrationIncomplete, name, k.version, n, srv.Name, first)
				}
				if sum != nil && *sum != shardschema.Checksum(v, k.part) {
					return fmt.Errorf("shardkit: %w: %s differs from the %s a failed migrate applied as version %d to %d shard schemas of server %q (%s first); "+
						"put that content back, fix what made it fail on the shard the failure named, and run migrate again; changes go in a new NNNN_name.sql",
						ErrMigrationChanged, shardschema.FileName(v, k.part), name, k.version, n, srv.Name, first)
				}
				return nil
			})
		}
		_ = conn.Close(ctx)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
			continue // shardkit not installed there yet
		}
		if errors.As(err, &pe) && pe.Code == "42703" {
			continue // no checksums yet: no Migrate of this version has run there
		}
		if err != nil {
			if errors.Is(err, ErrMigrationIncomplete) || errors.Is(err, ErrMigrationChanged) {
				return err
			}
			return &ServerError{Server: srv.Name, Err: err}
		}
	}
	return nil
}

// filesOf returns recorded files as a file system for ReadVersions.
func filesOf(have map[stepKey]recorded) fstest.MapFS {
	out := fstest.MapFS{}
	for _, r := range have {
		out[r.name] = &fstest.MapFile{Data: []byte(r.body), Mode: 0o444}
	}
	return out
}

// record is part p of v as the catalog records it.
func record(v Version, p shardschema.Part) catalog.ShardSQL {
	return catalog.ShardSQL{Version: v.Number, Part: string(p), Name: shardschema.FileName(v, p), Body: shardschema.PartSQL(v, p),
		SHA256: shardschema.Checksum(v, p)}
}
