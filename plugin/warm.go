package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"

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
// skipped (its first statement says so). It runs only when Config.WarmUp
// asks for it (WarmUpBlocking or WarmUpBackground): a fleet of processes each warming its own connections
// costs the servers more than the first reads it spares (see
// Config.WarmUp). The whole is bounded by Config.WarmUpTimeout, and runs
// after start-up with WarmUpBackground.
func (p *Plugin) warmUp(ctx context.Context, snap *router.Snapshot) {
	if ctx == nil {
		ctx = context.Background()
	}
	type work struct {
		db     *sql.DB
		shards []int
	}
	var todo []work
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		db, err := p.pools.get(snap, srv.Name)
		if err != nil || len(shards) == 0 {
			continue
		}
		todo = append(todo, work{db.DB, shards})
	}
	cancel := context.CancelFunc(func() {})
	if p.cfg.WarmUp == WarmUpBackground {
		// Start-up returns now; the warm-up outlives the caller's
		// context but not its bound.
		ctx = context.WithoutCancel(ctx)
	}
	if d := p.cfg.WarmUpTimeout; d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
	}
	run := func() {
		defer cancel()
		var wg sync.WaitGroup
		for _, w := range todo {
			wg.Go(func() { p.warmServer(ctx, w.db, w.shards) })
		}
		wg.Wait()
	}
	if p.cfg.WarmUp == WarmUpBackground {
		go run()
		return
	}
	run()
}

// warmServer warms shards on one connection of db, a batch of warmBatch
// shards of one table per statement, until done, an error or ctx's end.
func (p *Plugin) warmServer(ctx context.Context, db *sql.DB, shards []int) {
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
}
