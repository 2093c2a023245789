package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardkit/shardkit/router"
)

// tableCheckTimeout bounds the start-up check of each server.
const tableCheckTimeout = 5 * time.Second

const missingTablesSQL = `SELECT t.name, count(c.oid)
FROM unnest($2::text[]) AS t(name)
LEFT JOIN pg_namespace n ON n.nspname = ANY($1::text[])
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.name AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
GROUP BY t.name`

// checkTables checks, once at start-up, that every registered model's
// table, and each lookup table of its shard:"lookup" columns, exists in
// each shard schema of each server, so that a model
// whose table no per-shard SQL creates fails here, with what to do,
// instead of at its first statement. A server that does not answer is
// skipped: it is checked by its first statement instead.
func (p *Plugin) checkTables(ctx context.Context, snap *router.Snapshot) error {
	if ctx == nil {
		ctx = context.Background()
	}
	tables := make([]string, 0, len(p.byTable))
	for t, m := range p.byTable {
		tables = append(tables, t)
		for _, lc := range m.lookups {
			tables = append(tables, lc.table)
		}
	}
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		if len(shards) == 0 {
			continue
		}
		schemas := make([]string, len(shards))
		for i, s := range shards {
			schemas[i] = router.SchemaName(s)
		}
		db, err := p.pools.get(snap, srv.Name)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, tableCheckTimeout)
		rows, err := db.QueryContext(cctx, missingTablesSQL, schemas, tables)
		if err != nil {
			cancel()
			continue // unreachable now: its statements will say so
		}
		var missing []string
		for rows.Next() {
			var name string
			var n int
			if err := rows.Scan(&name, &n); err != nil {
				break
			}
			if n < len(schemas) {
				missing = append(missing, fmt.Sprintf("%s (in %d of %d schemas)", name, n, len(schemas)))
			}
		}
		rows.Close()
		cancel()
		if len(missing) > 0 {
			return fmt.Errorf("%w: server %s lacks table %s; add a per-shard SQL file that creates it and apply it with migrations.Migrate, or set Config.SkipTableCheck",
				ErrInvalidModel, srv.Name, strings.Join(missing, ", "))
		}
	}
	return nil
}
