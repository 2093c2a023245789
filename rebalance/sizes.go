package rebalance

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// Measure is what a plan balances.
type Measure string

// Measures.
const (
	ByBytes Measure = "bytes" // tables, indexes and TOAST of the shard's schema
	ByRows  Measure = "rows"  // rows: the larger of the planner's and the statistics' estimates
)

const (
	sqlShardBytes = `SELECT n.nspname, coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'm')
		WHERE n.nspname = ANY($1) GROUP BY n.nspname`
	sqlShardRows = `SELECT n.nspname, coalesce(sum(greatest(c.reltuples, s.n_live_tup, 0)), 0)::bigint
		FROM pg_namespace n
		LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind = 'r'
		LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = ANY($1) GROUP BY n.nspname`
)

// Sizes measures every shard on its current server, servers in parallel.
func (mv *Mover) Sizes(ctx context.Context, by Measure) (map[int]int64, error) {
	q := sqlShardBytes
	switch by {
	case ByBytes, "":
	case ByRows:
		q = sqlShardRows
	default:
		return nil, fmt.Errorf("shardkit: measure %q: want bytes or rows", by)
	}
	snap, err := mv.cfg.Catalog.Operator().Load(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(snap.Servers()))
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		if len(shards) == 0 {
			continue
		}
		names := make([]string, len(shards))
		for i, s := range shards {
			names[i] = router.SchemaName(s)
		}
		p, _, err := mv.server(ctx, snap, srv.Name)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows, err := p.Query(ctx, q, names)
			if err != nil {
				errs <- fmt.Errorf("shardkit: measure shards on %s: %w", srv.Name, err)
				return
			}
			var schema string
			var v int64
			_, err = pgx.ForEachRow(rows, []any{&schema, &v}, func() error {
				shard, err := router.ParseSchemaName(schema)
				if err != nil {
					return err
				}
				mu.Lock()
				out[shard] = v
				mu.Unlock()
				return nil
			})
			if err != nil {
				errs <- fmt.Errorf("shardkit: measure shards on %s: %w", srv.Name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return out, nil
}
