// Package memrows serves rows held in memory through database/sql, so
// that code which scans *sql.Rows (GORM's Scan, a caller's Row().Scan)
// reads them exactly as it would read a server's rows: database/sql's
// conversions, the column's scan type and database type name.
package memrows

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"sync"
)

// Column is one column of Rows: its name and what the driver reports of
// it.
type Column struct {
	Name   string
	DBType string       // as sql.ColumnType.DatabaseTypeName reports it
	Scan   reflect.Type // as sql.ColumnType.ScanType reports it
}

// Rows are the rows to serve: each row holds one driver value per column.
type Rows struct {
	Cols []Column
	Data [][]driver.Value
}

// Query serves r as *sql.Rows. The caller closes them.
func Query(ctx context.Context, r *Rows) (*sql.Rows, error) {
	return db().QueryContext(ctx, "", r)
}

// QueryRow serves the first of r's rows as *sql.Row, as QueryRowContext
// serves a server's.
func QueryRow(ctx context.Context, r *Rows) *sql.Row {
	return db().QueryRowContext(ctx, "", r)
}

// ErrRow returns a *sql.Row whose Scan returns err: a result for a caller
// of Row() where the statement failed before it ran, so that Scan reports
// why instead of panicking on a nil row.
func ErrRow(err error) *sql.Row {
	return db().QueryRowContext(context.Background(), "", failure{err})
}

// failure is the argument that makes the query fail with its error.
type failure struct{ err error }

var db = sync.OnceValue(func() *sql.DB { return sql.OpenDB(connector{}) })

var errArg = errors.New("memrows: the query's one argument must be *Rows")

// rows is the driver.Rows cursor over Rows.
type rows struct {
	r *Rows
	i int
}

// Columns is part of driver.Rows.
func (r *rows) Columns() []string {
	out := make([]string, len(r.r.Cols))
	for i, c := range r.r.Cols {
		out[i] = c.Name
	}
	return out
}

// Close is part of driver.Rows.
func (r *rows) Close() error { return nil }

// Next is part of driver.Rows.
func (r *rows) Next(dest []driver.Value) error {
	if r.i >= len(r.r.Data) {
		return io.EOF
	}
	copy(dest, r.r.Data[r.i])
	r.i++
	return nil
}

// ColumnTypeScanType is part of driver.RowsColumnTypeScanType.
func (r *rows) ColumnTypeScanType(i int) reflect.Type { return r.r.Cols[i].Scan }

// ColumnTypeDatabaseTypeName is part of driver.RowsColumnTypeDatabaseTypeName.
func (r *rows) ColumnTypeDatabaseTypeName(i int) string { return r.r.Cols[i].DBType }

// conn serves the Rows (or the failure) given as a query's one argument;
// it has no network connection, statements or transactions.
type conn struct{}

func (conn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("memrows: statements are not prepared")
}
func (conn) Close() error { return nil }
func (conn) Begin() (driver.Tx, error) {
	return nil, errors.New("memrows: no transactions")
}

// CheckNamedValue is part of driver.NamedValueChecker: the argument is
// passed as it is.
func (conn) CheckNamedValue(*driver.NamedValue) error { return nil }

// QueryContext is part of driver.QueryerContext.
func (conn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) != 1 {
		return nil, errArg
	}
	switch a := args[0].Value.(type) {
	case *Rows:
		return &rows{r: a}, nil
	case failure:
		return nil, a.err
	}
	return nil, errArg
}

type connector struct{}

func (connector) Connect(context.Context) (driver.Conn, error) { return conn{}, nil }
func (connector) Driver() driver.Driver                        { return drv{} }

type drv struct{}

func (drv) Open(string) (driver.Conn, error) { return conn{}, nil }
