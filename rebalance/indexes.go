package rebalance

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/internal/inventory"
	"github.com/shardkit/shardkit/internal/shardschema"
)

// sqlIndexSession prepares a transaction that builds indexes: the
// definitions read with search_path pg_catalog, and maintenance_work_mem
// raised to $1 bytes (kept if the server's is larger), so that a sort of a
// large table's keys stays in memory.
const sqlIndexSession = `SELECT set_config('search_path', 'pg_catalog', true),
	set_config('maintenance_work_mem', (greatest(pg_size_bytes(current_setting('maintenance_work_mem')), $1::bigint) / 1024)::text || 'kB', true)`

// attachable is a primary key or unique constraint simple enough to be
// made from a unique index built beforehand (ADD CONSTRAINT … USING
// INDEX): plain columns, not deferrable, no options.
var attachable = regexp.MustCompile(`^([pu]) (PRIMARY KEY|UNIQUE) \([^()]*\)$`)

// buildIndexes builds on the target what the copy left out (see
// stripTarget): the per-shard SQL's deferred indexes, the primary keys and
// unique constraints, the carried indexes, then foreign keys, exclusion
// constraints and triggers; and checks that the target's schema now
// matches the source's object for object. Index builds run in parallel
// (Config.CopyWorkers sessions, each with Config.IndexMemory): a primary
// key is built as a unique index alongside the table's other indexes (a
// plain CREATE INDEX does not block another on the same table, where
// ALTER TABLE … ADD PRIMARY KEY would), then attached as the constraint.
// Each part is idempotent: what the target has already is left alone.
func (mv *Mover) buildIndexes(ctx context.Context, mc *moveCtx) error {
	srcInv, tgtInv, err := inventory.ReadBoth(ctx, nil, mc.src, mc.tgt, mc.schema, barrierName, mc.role)
	if err != nil {
		return err
	}
	// The per-shard SQL's own index parts, recorded on the target as
	// applied, and the unique indexes of the keys.
	jobs := []func(ctx context.Context, tx pgx.Tx) error{
		func(ctx context.Context, tx pgx.Tx) error {
			return shardschema.ApplyIndexes(ctx, tx, mc.layout, mc.m.Shard, mv.cfg.ShardSQL)
		},
	}
	var attach []string
	for _, it := range inventory.Compare(srcInv, tgtInv).Missing {
		m := attachable.FindStringSubmatch(it.Def)
		if it.Obj.Kind != "constraint" || it.Why != "" || m == nil {
			continue
		}
		idx := srcInv.ConstraintIndex(it)
		if idx == nil || !strings.HasPrefix(idx.Def, "CREATE UNIQUE INDEX ") {
			continue
		}
		if _, ok := tgtInv.Items[idx.Key()]; !ok {
			def := idx.Def
			jobs = append(jobs, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, def)
				return err
			})
		}
		attach = append(attach, "ALTER TABLE "+ident(mc.schema, it.Obj.Table)+" ADD CONSTRAINT "+ident(it.Obj.Name)+
			" "+m[2]+" USING INDEX "+ident(idx.Obj.Name))
	}
	if err := mv.indexJobs(ctx, mc, jobs); err != nil {
		return err
	}
	// The indexes still missing are the carried ones.
	if tgtInv, err = inventory.Read(ctx, mc.tgt, mc.schema, barrierName, mc.role); err != nil {
		return err
	}
	jobs = jobs[:0]
	for _, it := range inventory.Compare(srcInv, tgtInv).Missing {
		if it.Obj.Kind == "index" && it.Why == "" && it.DDL != "" {
			ddl := it.DDL
			jobs = append(jobs, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, ddl)
				return err
			})
		}
	}
	if err := mv.indexJobs(ctx, mc, jobs); err != nil {
		return err
	}
	if len(attach) > 0 {
		if _, err := mc.tgt.Exec(ctx, strings.Join(attach, ";\n"), pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("make the keys of %s on the target from their indexes: %w", mc.schema, err)
		}
	}
	// The rest (foreign keys, which check their rows now, exclusion and
	// deferrable constraints, triggers), then the comparison.
	return carry(ctx, srcInv, mc.src, mc.tgt, mc.schema, mc.role, true, nil)
}

// indexJobs runs jobs on the target, Config.CopyWorkers at a time, each in
// a transaction of its own prepared by sqlIndexSession.
func (mv *Mover) indexJobs(ctx context.Context, mc *moveCtx, jobs []func(context.Context, pgx.Tx) error) error {
	if len(jobs) == 0 {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(mv.cfg.CopyWorkers)
	for _, job := range jobs {
		g.Go(func() error {
			return pgx.BeginFunc(gctx, mc.tgt, func(tx pgx.Tx) error {
				if _, err := tx.Exec(gctx, sqlIndexSession, mv.cfg.IndexMemory); err != nil {
					return err
				}
				return job(gctx, tx)
			})
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("build the indexes of %s on the target: %w", mc.schema, err)
	}
	return nil
}
