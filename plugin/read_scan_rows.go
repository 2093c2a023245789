package plugin

import (
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
)

// rowsAcross runs Row or Rows (and so Scan, which reads Rows) on several
// shards: the read is planned, run and merged as Find's (readAcross), and
// the merged rows — the rows Find would scan, in its order, with the
// columns the shards returned — are served through database/sql from
// memory (internal/memrows), as gorm:row serves a server's cursor. What
// Find refuses is refused with the same error; Row's refusal is its
// *sql.Row's Scan error too.
func (p *Plugin) rowsAcross(db *gorm.DB, d *decision) {
	stmt := db.Statement
	many, _ := db.Get("rows")
	stmt.Settings.Delete("rows")
	if db.DryRun {
		return // gorm:row runs nothing in a dry run either
	}
	var out *memrows.Rows
	p.readAcrossFresh(db, d, &out)
	if db.Error == nil && out == nil {
		out = &memrows.Rows{}
	}
	switch {
	case db.Error != nil && many == true:
	case db.Error != nil:
		stmt.Dest = memrows.ErrRow(db.Error)
	case many == true:
		rows, err := memrows.Query(stmt.Context, out)
		if err != nil {
			db.AddError(err)
			return
		}
		stmt.Dest = rows
	default:
		stmt.Dest = memrows.QueryRow(stmt.Context, out)
	}
	db.RowsAffected = -1
}
