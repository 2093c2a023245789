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
		if len(missing) > 0 {
			cancel()
			return fmt.Errorf("%w: server %s lacks table %s; add a per-shard SQL file that creates it and apply it with migrations.Migrate, or set Config.SkipTableCheck",
				ErrInvalidModel, srv.Name, strings.Join(missing, ", "))
		}
		err = p.checkKeyColumns(cctx, db, srv.Name, schemas[0])
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// caseInsensitiveSQL finds, among the given table.column pairs of one
// schema, the columns whose equality is not byte equality: of type
// citext (or a domain over it), or of a nondeterministic collation.
const caseInsensitiveSQL = `SELECT c.relname, a.attname,
    CASE WHEN t.typname = 'citext' OR bt.typname = 'citext' THEN 'type citext' ELSE 'nondeterministic collation ' || co.collname END
FROM unnest($2::text[], $3::text[]) AS k(tab, col)
JOIN pg_namespace n ON n.nspname = $1
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = k.tab
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = k.col AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON bt.oid = t.typbasetype
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE t.typname = 'citext' OR bt.typname = 'citext' OR NOT coalesce(co.collisdeterministic, true)
ORDER BY 1, 2`

// checkKeyColumns refuses a model whose string shard key, or text lookup
// column, compares other than by its bytes on the server. The shard of a
// string is a function of its bytes (router.HashString), and a lookup
// table holds the bytes too: under citext or a nondeterministic
// collation, 'Alice' and 'alice' are one value to Postgres and two to the
// plugin, so their rows would live on two shards and a read by either
// spelling would find only its own. No routing can be right there; the
// application is to store the key normalised.
func (p *Plugin) checkKeyColumns(ctx context.Context, db *serverDB, server, schema string) error {
	var tabs, cols []string
	for t, m := range p.byTable {
		if m.kind == keyString {
			tabs, cols = append(tabs, t), append(cols, m.key.DBName)
		}
		for _, lc := range m.lookups {
			if lc.text {
				tabs, cols = append(tabs, t), append(cols, lc.column)
			}
		}
	}
	if len(tabs) == 0 {
		return nil
	}
	rows, err := db.QueryContext(ctx, caseInsensitiveSQL, schema, tabs, cols)
	if err != nil {
		return nil // unreachable now: its statements will say so
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var tab, col, why string
		if err := rows.Scan(&tab, &col, &why); err != nil {
			return nil
		}
		found = append(found, fmt.Sprintf("%s.%s (%s)", tab, col, why))
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: on server %s, %s compares case-insensitively, but a string shard key or lookup value is routed by its bytes, so 'Alice' and 'alice' would live on two shards; normalise the key: store it in a text column of a deterministic collation, lower-cased (or otherwise normalised) by the application, with a CHECK constraint that it is",
		ErrInvalidModel, server, strings.Join(found, ", "))
}
