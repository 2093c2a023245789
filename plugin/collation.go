package plugin

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardkit/shardkit/router"
)

// The plugin merges rows of several shards in Go. Integers, times and the
// like order the same there as in Postgres; text does only under the C
// (byte-order) collation. So at start-up the plugin reads, on each server,
// the collation every text column of the registered tables orders by
// (its own, or the database's default), and a merge that would order
// text of another collation (ORDER BY a text column, min/max of text
// across shards) is refused instead of answered in the wrong order.

const textCollationsSQL = `SELECT c.relname, a.attname,
    CASE WHEN co.collname IS NULL OR co.collname = 'default' THEN d.datcollate ELSE co.collname END
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1
JOIN pg_database d ON d.datname = current_database()
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE c.relname = ANY($2::text[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.attcollation <> 0`

// byteOrdered reports whether a collation orders text as bytes do.
func byteOrdered(collation string) bool {
	switch strings.ToLower(collation) {
	case "c", "posix", "ucs_basic":
		return true
	}
	return false
}

// readCollations records, per registered model, the text columns whose
// collation is not byte order on some server (model.textCollation). A
// server that does not answer is skipped, as in the table check: its
// shards hold the same per-shard SQL.
func (p *Plugin) readCollations(ctx context.Context, snap *router.Snapshot) {
	if ctx == nil {
		ctx = context.Background()
	}
	tables := make([]string, 0, len(p.byTable))
	for t, m := range p.byTable {
		tables = append(tables, t)
		m.textCollation = map[string]string{}
	}
	for _, srv := range snap.Servers() {
		shards := snap.ShardsOn(srv.Name)
		if len(shards) == 0 {
			continue
		}
		db, err := p.pools.get(snap, srv.Name)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, tableCheckTimeout)
		rows, err := db.QueryContext(cctx, textCollationsSQL, router.SchemaName(shards[0]), tables)
		if err != nil {
			cancel()
			continue
		}
		for rows.Next() {
			var table, column, collation string
			if rows.Scan(&table, &column, &collation) != nil {
				break
			}
			if m := p.byTable[table]; m != nil && !byteOrdered(collation) {
				m.textCollation[column] = collation
			}
		}
		rows.Close()
		cancel()
	}
}

// textOrderErr refuses merging rows of several shards in the order of a
// text column whose collation is not byte order.
func (m *model) textOrderErr(column string) error {
	c, ok := m.textCollation[column]
	if !ok {
		return nil
	}
	return fmt.Errorf("%w: ordering text column %s across shards: its collation %q orders differently from byte order, which the merge uses; "+
		"order by a non-text column, give the column COLLATE \"C\" in the per-shard SQL, or scope the query to one shard", ErrUnroutableSQL, column, c)
}

// anyTextCollation returns a text column of the model whose collation is
// not byte order, if there is one.
func (m *model) anyTextCollation() (string, string, bool) {
	for col, c := range m.textCollation {
		return col, c, true
	}
	return "", "", false
}
