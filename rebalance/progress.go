package rebalance

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

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
