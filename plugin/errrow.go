package plugin

import (
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
)

// failRow records err and, for a Row statement, leaves an error row as
// its result.
func failRow(db *gorm.DB, o op, m *model, shard int, err error) {
	fail(db, m, shard, err)
	if o == opRow {
		if v, ok := db.Get("rows"); ok && v == false {
			db.Statement.Dest = memrows.ErrRow(db.Error)
		}
	}
}
