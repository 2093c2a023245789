package rebalance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const sqlSubErrors = `SELECT coalesce(sum(apply_error_count + sync_error_count), 0)::bigint
	FROM pg_stat_subscription_stats WHERE subname = $1`

// maxSyncErrors is how many failed attempts of the subscription's workers
// waitCopied tolerates (they retry on their own) before giving up.
const maxSyncErrors = 5

const sqlSchemaHeap = `SELECT coalesce(sum(pg_relation_size(c.oid)), 0)::bigint, coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relkind = 'r'`

// schemaHeap returns the heap bytes and estimated rows of a schema's tables.
func schemaHeap(ctx context.Context, p *pgxpool.Pool, schema string) (bytes, rows int64, err error) {
	err = p.QueryRow(ctx, sqlSchemaHeap, schema).Scan(&bytes, &rows)
	return bytes, rows, err
}

func (mv *Mover) report(mc *moveCtx, phase string, done, total, rows int64) {
	if mv.cfg.Progress != nil {
		mv.cfg.Progress(Progress{MoveID: mc.m.ID, Shard: mc.m.Shard, Phase: phase, Done: min(done, total), Total: total, Rows: rows})
	}
}

// waitCopied waits until the subscription's initial copy of every table is
// done, reporting bytes copied against the source's heap size.
func (mv *Mover) waitCopied(ctx context.Context, mc *moveCtx) error {
	total, srcRows, err := schemaHeap(ctx, mc.src, mc.schema)
	if err != nil {
		return err
	}
	var seenErrs int64
	for {
		var errs int64
		if err := mc.tgt.QueryRow(ctx, sqlSubErrors, mc.n.fwd).Scan(&errs); err != nil {
			return fmt.Errorf("read subscription errors: %w", err)
		}
		if errs > seenErrs {
			mv.log.Warn("shardkit: subscription worker failed; it retries (details in the target server's log)",
				"move", mc.m.ID, "shard", mc.m.Shard, "subscription", mc.n.fwd, "errors", errs)
			seenErrs = errs
		}
		if errs >= maxSyncErrors {
			return fmt.Errorf("subscription %s failed %d times copying the shard; see the target server's log, fix the cause and resume, or roll back", mc.n.fwd, errs)
		}
		n, ready, err := subscriptionTables(ctx, mc.tgt, mc.n.fwd)
		if err != nil {
			return fmt.Errorf("read subscription state: %w", err)
		}
		done, _, err := schemaHeap(ctx, mc.tgt, mc.schema)
		if err != nil {
			return err
		}
		var rows int64
		if total > 0 {
			rows = int64(float64(srcRows) * float64(min(done, total)) / float64(total))
		}
		if ready == n {
			mv.report(mc, "copy", total, total, srcRows)
			return nil
		}
		mv.report(mc, "copy", done, total, rows)
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitCaughtUp waits until the forward slot's lag is under CatchUpBytes.
func (mv *Mover) waitCaughtUp(ctx context.Context, mc *moveCtx) error {
	var first int64 = -1
	for {
		lag, err := slotLag(ctx, mc.src, mc.n.fwd)
		if err != nil {
			return err
		}
		if first < 0 {
			first = max(lag, 1)
		}
		mv.report(mc, "catchup", max(first-lag, 0), first, 0)
		if lag < mv.cfg.CatchUpBytes {
			mv.report(mc, "catchup", first, first, 0)
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}
