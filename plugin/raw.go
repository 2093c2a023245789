package plugin

import (
	"fmt"
	"strings"

	"github.com/shardkit/shardkit/internal/sqlcond"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// routeRaw handles SQL written by the caller (Raw, Exec, or a Find with
// SQL already set). SQL that names no sharded table goes to the default
// connection. SQL that names one runs only inside a shard-pinned
// transaction, where search_path is the shard's schema; elsewhere it is
// refused, since the plugin cannot know which shard it means.
func (p *Plugin) routeRaw(db *gorm.DB) {
	stmt := db.Statement
	table := p.mentions(stmt.SQL.String())
	if table == "" {
		if err := p.unsharded(stmt); err != nil {
			db.AddError(err)
		}
		return
	}
	if t := txOf(stmt.ConnPool); t != nil && t.atomic {
		db.AddError(&ShardError{Shard: -1, Table: table, Err: fmt.Errorf("%w: raw SQL names sharded table %q inside an atomic transaction, which has no single search_path; use model statements, or a db.Clauses(plugin.Shard(key)).Transaction(…) for raw SQL", ErrUnroutableSQL, table)})
		return
	}
	if t := txOf(stmt.ConnPool); t != nil && !t.statement {
		if shard, server := t.pinned(); shard >= 0 {
			if other := otherSchema(stmt.SQL.String(), shard); other != "" {
				db.AddError(&ShardError{Shard: shard, Server: server, Table: table, Err: fmt.Errorf("%w: raw SQL names schema %s in a transaction pinned to shard %d; a transaction reads and writes its own shard only", ErrCrossShard, other, shard)})
				return
			}
			v, err := t.view(server, p.router.Snapshot())
			if err != nil {
				db.AddError(&ShardError{Shard: shard, Server: server, Table: table, Err: err})
				return
			}
			stmt.ConnPool = v
			return
		}
	}
	db.AddError(&ShardError{Shard: -1, Table: table, Err: fmt.Errorf("%w: raw SQL names sharded table %q; run it inside db.Clauses(plugin.Shard(key)).Transaction(…), where search_path is the shard's schema", ErrUnroutableSQL, table)})
}

// otherSchema returns a shard schema name (shard_NNNN) in sql other than
// the shard's, or "".
func otherSchema(sql string, shard int) string {
	lower := strings.ToLower(sql)
	for i := 0; ; {
		j := strings.Index(lower[i:], "shard_")
		if j < 0 {
			return ""
		}
		j += i
		end := j + len("shard_")
		for end < len(lower) && sqlcond.IsIdentByte(lower[end]) {
			end++
		}
		if (j == 0 || !sqlcond.IsIdentByte(lower[j-1])) && end > j+len("shard_") && sqlcond.IsDigit(lower[j+len("shard_")]) {
			if s, err := router.ParseSchemaName(lower[j:end]); err != nil || s != shard {
				return lower[j:end]
			}
		}
		i = end
	}
}

// mentions returns the first registered table that sql names as a word,
// or "".
func (p *Plugin) mentions(sql string) string {
	if len(p.byTable) == 0 || sql == "" {
		return ""
	}
	lower := strings.ToLower(sql)
	for name := range p.byTable {
		n := strings.ToLower(name)
		for i := 0; ; {
			j := strings.Index(lower[i:], n)
			if j < 0 {
				break
			}
			j += i
			end := j + len(n)
			if (j == 0 || !sqlcond.IsIdentByte(lower[j-1])) && (end == len(lower) || !sqlcond.IsIdentByte(lower[end])) {
				return name
			}
			i = j + 1
		}
	}
	return ""
}
