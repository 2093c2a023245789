package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// execUnprepared runs SQL the plugin will not send again without
// preparing it (so it takes no place in the connection's statement
// cache), when the pool is pgx's.
func execUnprepared(ctx context.Context, conn *sql.Conn, q string) error {
	return conn.Raw(func(dc any) error {
		if c, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			_, err := c.Conn().Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
			return err
		}
		return errNotPgx
	})
}

var errNotPgx = errors.New("not a pgx connection")

// warmBatch is the number of shards one warm-up statement opens. Its
// branches are planned as subqueries, which Postgres 15 plans in 1.3–1.6
// ms for 100 and 4.3 ms for 250 (EXPLAIN (SUMMARY), 20 rows per table):
// batches of 100 keep the warm-up's own planning small.
const warmBatch = 100

// warmUpTimeout bounds the start-up warm-up of all servers.
const warmUpTimeout = 60 * time.Second

// warmUp opens, on one connection of each server's pool, every
// registered table of every shard the server holds, with their primary
// key indexes: a Postgres backend loads a table's catalog entries the
// first time a statement names it, which for the thousands of schemas
// of a server costs far more than the statements themselves. Paid here,
// at start-up, it is not paid by the first read across shards (the pool
// hands that read the connection it warmed: database/sql reuses the most
// recently returned one). Each batch is planned as SELECT * (the planner
// then loads every column's statistics, which it needs for the widths of
// a real read) and run under EXPLAIN ANALYZE (the executor opens each
// table and index and reads their pages), so no rows come back however
// wide they are. Servers are warmed at once; one that does not answer is
// skipped (its first statement says so).
func (p *Plugin) warmUp(ctx context.Context, snap *router.Snapshot) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		db, err := p.pools.get(snap, srv.Name)
		if err != nil || len(shards) == 0 {
			continue
		}
		wg.Go(func() {
			conn, err := db.Conn(ctx)
			if err != nil {
				return
			}
			defer conn.Close()
			for _, m := range p.byTable {
				for start := 0; start < len(shards); start += warmBatch {
					var b strings.Builder
					b.WriteString("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ")
					for j, s := range shards[start:min(start+warmBatch, len(shards))] {
						if j > 0 {
							b.WriteString(" UNION ALL ")
						}
						b.WriteString("(SELECT * FROM ")
						b.WriteString(pgx.Identifier{router.SchemaName(s), m.table}.Sanitize())
						b.WriteString(" ORDER BY ")
						b.WriteString(pgx.Identifier{m.pk.DBName}.Sanitize())
						b.WriteString(" LIMIT 1)")
					}
					err := execUnprepared(ctx, conn, b.String())
					if errors.Is(err, errNotPgx) {
						_, err = conn.ExecContext(ctx, b.String())
					}
					if err != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
