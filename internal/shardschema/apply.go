package shardschema

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// DefaultBatchSize is how many schemas share one of Provision's
// transactions when ProvisionOptions.BatchSize is 0.
const DefaultBatchSize = 25

// Statements of the per-schema machinery.
const (
	sqlApplied = `SELECT schema_name, version, part FROM shardkit.shard_migrations WHERE schema_name = ANY($1)`
	sqlRecord  = `INSERT INTO shardkit.shard_migrations (schema_name, version, part, name, sha256)
SELECT s, v, p, n, NULLIF(c, '') FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) AS u(s, v, p, n, c)`
	sqlForget = `DELETE FROM shardkit.shard_migrations WHERE schema_name = $1`
)

// ApplyShard creates the schema of one logical shard on a server, or brings
// it up to date: shardkit's server objects (EnsureServer), the schema, its
// id_seq and next_id(), then every version of shardSQL not yet applied, each
// recorded in the server's shardkit.shard_migrations in the same
// transaction. Running it again does nothing. The shard mover uses it with
// DeferIndexes to create a target schema, then ApplyIndexes after the copy.
func ApplyShard(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS, opts ApplyOptions) error {
	versions, err := ReadVersions(shardSQL)
	if err != nil {
		return err
	}
	if err := EnsureServer(ctx, db, layout); err != nil {
		return err
	}
	mode := ModeAll
	if opts.DeferIndexes {
		mode = ModeDeferIndexes
	}
	return ApplySchemas(ctx, db, layout, []int{shard}, versions, mode, 1, opts.Then, nil)
}

// ApplyIndexes applies the NNNN_name.indexes.sql parts that ApplyShard
// deferred on one shard schema (plain CREATE INDEX, inside a transaction).
func ApplyIndexes(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS) error {
	versions, err := ReadVersions(shardSQL)
	if err != nil {
		return err
	}
	return ApplySchemas(ctx, db, layout, []int{shard}, versions, ModeIndexesOnly, 1, nil, nil)
}

// DropShard drops a shard's schema with everything in it and forgets its
// migration records on this server, in one transaction: after a shard has
// moved away, this removes the old copy so that the shard could later be
// provisioned here again.
func DropShard(ctx context.Context, db DB, shard int) error {
	schema := router.SchemaName(shard)
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlShardLockBatch, migrateLockKey, []int32{int32(shard)}); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			return &ShardError{Shard: shard, Err: privilegeError(ctx, tx, err)}
		}
		_, err := tx.Exec(ctx, sqlForget, schema)
		return err
	})
}

// Mode says which parts of a schema's versions ApplySchemas, Pending and
// ApplyOne apply.
type Mode int

// The modes: every part; the tables parts only, secondary indexes and
// what runs outside a transaction deferred (the shard mover's target, or
// ProvisionOptions.DeferIndexes); the deferred parts only.
const (
	ModeAll Mode = iota
	ModeDeferIndexes
	ModeIndexesOnly
)

type stepKey struct {
	version int
	part    Part
}

type step struct {
	stepKey
	name string
	sql  string
	sum  string // SHA-256 of sql; "" for shardkit's own template
	noTx bool   // marked with NoTransactionMarker: runs outside a transaction
}

// plan lists what a schema still needs, in order.
func plan(layout idgen.Layout, shard int, done map[stepKey]bool, versions []Version, mode Mode) ([]step, error) {
	var out []step
	if mode != ModeIndexesOnly && !done[stepKey{0, PartTables}] {
		sql, err := render("shard_template.sql", valsFor(layout, shard))
		if err != nil {
			return nil, err
		}
		out = append(out, step{stepKey{0, PartTables}, "shardkit", sql, "", false})
	}
	maxDone := 0
	for k := range done {
		if k.part == PartTables && k.version > maxDone {
			maxDone = k.version
		}
	}
	for _, v := range versions {
		tablesNoTx := noTransaction(v.Tables)
		if mode != ModeIndexesOnly && !done[stepKey{v.Number, PartTables}] && (mode != ModeDeferIndexes || !tablesNoTx) {
			if v.Number < maxDone {
				return nil, &ShardError{Shard: shard, File: v.Name, Err: fmt.Errorf(
					"%w: version %d is new but version %d is already applied; renumber it above %d",
					ErrMigrationOrder, v.Number, maxDone, maxDone)}
			}
			out = append(out, step{stepKey{v.Number, PartTables}, v.Name, v.Tables, v.checksum(PartTables), tablesNoTx})
		}
		// The shard mover defers what runs outside a transaction with the
		// secondary indexes: a new schema's tables come in one transaction.
		if mode == ModeIndexesOnly && tablesNoTx && !done[stepKey{v.Number, PartTables}] {
			out = append(out, step{stepKey{v.Number, PartTables}, v.Name, v.Tables, v.checksum(PartTables), true})
		}
		if v.Indexes != "" && mode != ModeDeferIndexes && !done[stepKey{v.Number, PartIndexes}] {
			if mode == ModeIndexesOnly && !done[stepKey{v.Number, PartTables}] {
				continue // its tables are not there yet
			}
			out = append(out, step{stepKey{v.Number, PartIndexes}, v.fileName(PartIndexes), v.Indexes, v.checksum(PartIndexes), noTransaction(v.Indexes)})
		}
	}
	return out, nil
}

// readApplied returns the applied steps of each schema among shards.
func readApplied(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, shards []int) (map[int]map[stepKey]bool, error) {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = router.SchemaName(s)
	}
	rows, err := q.Query(ctx, sqlApplied, names)
	if err != nil {
		return nil, err
	}
	out := map[int]map[stepKey]bool{}
	var schema, part string
	var version int
	_, err = pgx.ForEachRow(rows, []any{&schema, &version, &part}, func() error {
		shard, err := router.ParseSchemaName(schema)
		if err != nil {
			return err
		}
		if out[shard] == nil {
			out[shard] = map[stepKey]bool{}
		}
		out[shard][stepKey{version, Part(part)}] = true
		return nil
	})
	return out, err
}

// Pending returns the shards among shards that need any step.
func Pending(ctx context.Context, db DB, layout idgen.Layout, shards []int, versions []Version, mode Mode) ([]int, error) {
	var out []int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		applied, err := readApplied(ctx, tx, shards)
		if err != nil {
			return err
		}
		for _, s := range shards {
			steps, err := plan(layout, s, applied[s], versions, mode)
			if err != nil {
				return err
			}
			if len(steps) > 0 {
				out = append(out, s)
			}
		}
		return nil
	})
	return out, err
}

// ApplySchemas applies the pending steps of each shard's schema, batch
// schemas per transaction. Each batch locks its schemas (so concurrent
// callers never apply a step twice) and re-reads their records under the
// lock. A step marked to run outside a transaction ends its schema's part
// of the batch; after the batch commits, such schemas are finished one by
// one on a session of db (ApplyOne). done is called after each committed
// batch with the number of schemas in it.
func ApplySchemas(ctx context.Context, db DB, layout idgen.Layout, shards []int, versions []Version, mode Mode, batch int,
	then func(ctx context.Context, tx pgx.Tx) error, done func(n int)) error {
	for start := 0; start < len(shards); start += batch {
		end := min(start+batch, len(shards))
		part := shards[start:end]
		var rest []int
		// Inside a caller's transaction (a new schema nobody serves yet:
		// the shard mover's target, or its rehearsal), steps marked to run
		// outside one run in it, their concurrent index builds as plain ones.
		_, inTx := db.(pgx.Tx)
		if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			if rest, err = applyBatch(ctx, tx, layout, part, versions, mode, inTx); err != nil || then == nil {
				return err
			}
			return then(ctx, tx)
		}); err != nil {
			return err
		}
		if len(rest) > 0 {
			if err := withSession(ctx, db, func(conn *pgx.Conn) error {
				for _, shard := range rest {
					if _, err := ApplyOne(ctx, conn, layout, shard, versions, mode, Timeouts{}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if done != nil {
			done(len(part))
		}
	}
	return nil
}

// applyBatch applies, in tx, the steps each shard's schema lacks up to its
// first step that must run outside a transaction, and returns the shards
// left with such a step.
func applyBatch(ctx context.Context, tx pgx.Tx, layout idgen.Layout, shards []int, versions []Version, mode Mode, inTx bool) ([]int, error) {
	keys := make([]int32, len(shards))
	for i, s := range shards {
		keys[i] = int32(s)
	}
	if _, err := tx.Exec(ctx, sqlShardLockBatch, migrateLockKey, keys); err != nil {
		return nil, Classify(err, "")
	}
	applied, err := readApplied(ctx, tx, shards)
	if err != nil {
		return nil, err
	}
	var rec records
	var rest []int
	for _, shard := range shards {
		steps, err := plan(layout, shard, applied[shard], versions, mode)
		if err != nil {
			return nil, err
		}
		more, err := execSteps(ctx, tx, shard, steps, &rec, nil, inTx)
		if err != nil {
			return nil, err
		}
		if more {
			rest = append(rest, shard)
		}
	}
	return rest, rec.write(ctx, tx)
}

// records are applied steps to record in shardkit.shard_migrations.
type records struct {
	schema, part, name, sum []string
	version                 []int32
}

func (r *records) add(schema string, st step) {
	r.schema = append(r.schema, schema)
	r.version = append(r.version, int32(st.version))
	r.part = append(r.part, string(st.part))
	r.name = append(r.name, st.name)
	r.sum = append(r.sum, st.sum)
}

func (r *records) write(ctx context.Context, q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	if len(r.schema) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, sqlRecord, r.schema, r.version, r.part, r.name, r.sum)
	return err
}

// execSteps runs a schema's steps in tx up to the first one marked to run
// outside a transaction, adding each to rec, and reports whether such a
// step is left. running, if not nil, is set to the step under way. With
// inTx, a marked step runs in tx too (inTransaction).
func execSteps(ctx context.Context, tx pgx.Tx, shard int, steps []step, rec *records, running *string, inTx bool) (bool, error) {
	if len(steps) == 0 {
		return false, nil
	}
	if steps[0].noTx && !inTx {
		return true, nil
	}
	schema := router.SchemaName(shard)
	ident := pgx.Identifier{schema}.Sanitize()
	// Ours: the schema itself and the search_path, in one round trip.
	prelude := "CREATE SCHEMA IF NOT EXISTS " + ident + ";\nSET LOCAL search_path TO " + ident
	if _, err := tx.Exec(ctx, prelude); err != nil {
		return false, &ShardError{Shard: shard, Err: privilegeError(ctx, tx, err)}
	}
	for _, st := range steps {
		if st.noTx && !inTx {
			return true, nil
		}
		if running != nil {
			*running = st.name
		}
		sql := st.sql
		if st.noTx {
			sql = inTransaction(sql)
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			if IsLockTimeout(err) {
				return false, err
			}
			return false, &ShardError{Shard: shard, File: st.name, Err: privilegeError(ctx, tx, err)}
		}
		rec.add(schema, st)
	}
	return false, nil
}

// PlannedStep is a step a schema still needs: its file ("shardkit" for
// shardkit's own template) and whether it runs outside a transaction.
type PlannedStep struct {
	File string
	NoTx bool
}

// PendingSteps returns the steps each of shards still needs, for a dry
// run; a server where shardkit is not installed yet needs everything.
func PendingSteps(ctx context.Context, db DB, layout idgen.Layout, shards []int, versions []Version, mode Mode) (map[int][]PlannedStep, error) {
	var applied map[int]map[stepKey]bool
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		applied, err = readApplied(ctx, tx, shards)
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		applied, err = nil, nil // a dry run on a server not provisioned yet
	}
	if err != nil {
		return nil, err
	}
	out := map[int][]PlannedStep{}
	for _, s := range shards {
		steps, err := plan(layout, s, applied[s], versions, mode)
		if err != nil {
			return nil, err
		}
		for _, st := range steps {
			out[s] = append(out[s], PlannedStep{File: st.name, NoTx: st.noTx})
		}
	}
	return out, nil
}
