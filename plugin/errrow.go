package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"gorm.io/gorm"
)

// errConnector is a database/sql connector that fails with its error; it
// never opens a network connection.
type errConnector struct{ err error }

func (c errConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c errConnector) Driver() driver.Driver                        { return errDriver(c) }

type errDriver errConnector

func (d errDriver) Open(string) (driver.Conn, error) { return nil, d.err }

// errRow returns a *sql.Row whose Scan returns err. GORM's Row() returns
// nil when a callback failed, and Row().Scan would then panic; a refused
// Row statement gets this row instead, so Scan reports the refusal.
func errRow(err error) *sql.Row {
	db := sql.OpenDB(errConnector{err: err})
	defer db.Close()
	return db.QueryRowContext(context.Background(), "")
}

// failRow records err and, for a Row statement, leaves an error row as
// its result.
func failRow(db *gorm.DB, o op, m *model, shard int, err error) {
	fail(db, m, shard, err)
	if o == opRow {
		if v, ok := db.Get("rows"); ok && v == false {
			db.Statement.Dest = errRow(db.Error)
		}
	}
}
