package readexec

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shardkit/shardkit/internal/memrows"
)

// A read across shards that runs prepared is shardkit's heaviest
// statement on the client: up to a page of rows from each of its 20
// statements, most of them dropped by the merge. database/sql costs it a
// goroutine per query (to watch the context), a lock and a conversion per
// value, and a copy of every value handed out; pgx's database/sql driver
// converts every value once more before that. The stage runs the
// statement on the pool's pgx connection itself (pipe.go): the same
// connection (taken from and returned to the same pool), the same plan
// generation, and each value converted as pgx's driver converts it for
// database/sql, so that what the merge and GORM's Scan see is what
// ReadAll would have returned.

// ReadNamed runs text as a named prepared statement on a connection of
// db and reads every row: a pipeline of one statement (ReadPipelined),
// from the connection's cache of prepared reads.
//
// With f set (a read merged in Go, late scanned, of unit u), a row that
// cannot enter the read's page is dropped as it arrives, its ORDER BY
// values alone converted (Filter).
func ReadNamed(cfg *Config, ctx context.Context, db *sql.DB, text string, vars []any, f Filter, u int) (Partials, error) {
	var pt Partials
	var err error
	ReadPipelined(cfg, ctx, db, []PipeStmt{{SQL: text, Vars: vars, Filter: f, Unit: u}}, 0, func(_ int, p Partials, e error) bool {
		pt, err = p, e
		return true
	})
	return pt, err
}

// queryOn runs text on pc in mode and reads every row (but those f
// drops), each value converted as pgx's database/sql driver converts it.
func queryOn(ctx context.Context, pc *pgx.Conn, text string, mode pgx.QueryExecMode, vars []any, f Filter, u int) (Partials, error) {
	args := make([]any, 2, len(vars)+2)
	args[0], args[1] = sqlResultFormats, mode
	for _, v := range vars {
		if na, ok := v.(sql.NamedArg); ok { // database/sql passes a named argument's value
			v = na.Value
		}
		args = append(args, v)
	}
	rows, err := pc.Query(ctx, text, args...)
	if err != nil {
		return Partials{}, err
	}
	defer rows.Close()
	s := newRowSink(pc.TypeMap(), rows.FieldDescriptions(), f, u)
	defer s.done()
	for rows.Next() {
		if err := s.add(rows.RawValues()); err != nil {
			return s.pt, err
		}
	}
	rows.Close()
	return s.pt, rows.Err()
}

// readResult reads a pipelined statement's rows, as queryOn does.
func readResult(rr *pgconn.ResultReader, m *pgtype.Map, f Filter, u int) (Partials, error) {
	s := newRowSink(m, rr.FieldDescriptions(), f, u)
	defer s.done()
	for rr.NextRow() {
		if err := s.add(rr.Values()); err != nil {
			_, _ = rr.Close()
			return s.pt, err
		}
	}
	_, err := rr.Close()
	return s.pt, err
}

// rowSink keeps a statement's rows: each value converted as pgx's
// database/sql driver converts it, those f's cut drops left out.
type rowSink struct {
	pt    Partials
	conv  []ValueFunc
	keep  Cut
	block []any
	per   int
}

func newRowSink(m *pgtype.Map, fds []pgconn.FieldDescription, f Filter, u int) *rowSink {
	s := &rowSink{per: 1}
	s.pt.Cols, s.conv = DescribeColumns(m, fds)
	if f != nil {
		s.keep = f.Cut(s.pt.Cols, s.conv, u)
	}
	return s
}

// add keeps a row, given as its wire values. Each row's values are a
// slice of a block shared by several rows, as ReadAll keeps them.
func (s *rowSink) add(raw [][]byte) error {
	if s.keep != nil && s.keep.Drop(raw) {
		return nil
	}
	n := len(s.pt.Cols)
	if len(s.block) < n {
		s.block = make([]any, n*s.per)
		s.per = min(2*s.per, 64)
	}
	vals := s.block[:n:n]
	s.block = s.block[n:]
	for i, v := range raw {
		if v == nil {
			continue
		}
		var err error
		if vals[i], err = s.conv[i](v); err != nil {
			return fmt.Errorf("convert field %d failed: %w", i, err)
		}
	}
	s.pt.Rows = append(s.pt.Rows, vals)
	return nil
}

// done counts the rows the cut dropped.
func (s *rowSink) done() {
	if s.keep != nil {
		s.keep.Done()
	}
}

// sqlResultFormats are the result formats pgx's database/sql driver asks
// for (stdlib's databaseSQLResultFormats): binary for the types it
// converts from binary, text for every other, which it hands out as the
// server's text.
var sqlResultFormats = pgx.QueryResultFormatsByOID{
	pgtype.BoolOID:        pgx.BinaryFormatCode,
	pgtype.ByteaOID:       pgx.BinaryFormatCode,
	pgtype.CIDOID:         pgx.BinaryFormatCode,
	pgtype.DateOID:        pgx.BinaryFormatCode,
	pgtype.Float4OID:      pgx.BinaryFormatCode,
	pgtype.Float8OID:      pgx.BinaryFormatCode,
	pgtype.Int2OID:        pgx.BinaryFormatCode,
	pgtype.Int4OID:        pgx.BinaryFormatCode,
	pgtype.Int8OID:        pgx.BinaryFormatCode,
	pgtype.OIDOID:         pgx.BinaryFormatCode,
	pgtype.TimestampOID:   pgx.BinaryFormatCode,
	pgtype.TimestamptzOID: pgx.BinaryFormatCode,
	pgtype.XIDOID:         pgx.BinaryFormatCode,
}

// ValueFunc converts a column's wire value (never NULL) into the value
// pgx's database/sql driver gives for it.
type ValueFunc func(src []byte) (any, error)

// DescribeColumns describes the columns as pgx's database/sql driver
// reports them through sql.ColumnType (its name, DatabaseTypeName and
// ScanType), with the conversion of each column's values the driver
// makes (stdlib's Rows.Next). Values that are bytes are copies the
// caller owns, as database/sql's Scan into an *any makes them.
func DescribeColumns(m *pgtype.Map, fds []pgconn.FieldDescription) ([]memrows.Column, []ValueFunc) {
	cols := make([]memrows.Column, len(fds))
	conv := make([]ValueFunc, len(fds))
	for i, fd := range fds {
		cols[i] = memrows.Column{Name: fd.Name, DBType: databaseTypeName(m, fd.DataTypeOID), Scan: scanType(fd.DataTypeOID)}
		conv[i] = convertColumn(m, fd.DataTypeOID, fd.Format)
	}
	return cols, conv
}

// databaseTypeName is stdlib's Rows.ColumnTypeDatabaseTypeName.
func databaseTypeName(m *pgtype.Map, oid uint32) string {
	if dt, ok := m.TypeForOID(oid); ok {
		return strings.ToUpper(dt.Name)
	}
	return strconv.FormatInt(int64(oid), 10)
}

// scanType is stdlib's Rows.ColumnTypeScanType.
func scanType(oid uint32) reflect.Type {
	switch oid {
	case pgtype.Float8OID:
		return reflect.TypeFor[float64]()
	case pgtype.Float4OID:
		return reflect.TypeFor[float32]()
	case pgtype.Int8OID:
		return reflect.TypeFor[int64]()
	case pgtype.Int4OID:
		return reflect.TypeFor[int32]()
	case pgtype.Int2OID:
		return reflect.TypeFor[int16]()
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.NumericOID:
		return reflect.TypeFor[float64]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	case pgtype.ByteaOID:
		return reflect.TypeFor[[]byte]()
	default:
		return reflect.TypeFor[string]()
	}
}

// convertColumn is stdlib's Rows.initValueFuncs for one column: the Go
// value it scans each type into, and what it hands database/sql of it.
func convertColumn(m *pgtype.Map, oid uint32, format int16) ValueFunc {
	switch oid {
	case pgtype.BoolOID:
		return scanAs[bool](m, oid, format, func(d bool) (any, error) { return d, nil })
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return scanAs[[]byte](m, oid, format, func(d []byte) (any, error) { return bytes.Clone(d), nil })
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return scanAs(m, oid, format, func(d pgtype.Uint32) (any, error) { return d.Value() })
	case pgtype.DateOID:
		return scanAs(m, oid, format, func(d pgtype.Date) (any, error) { return d.Value() })
	case pgtype.Float4OID:
		return scanAs[float32](m, oid, format, func(d float32) (any, error) { return float64(d), nil })
	case pgtype.Float8OID:
		return scanAs[float64](m, oid, format, func(d float64) (any, error) { return d, nil })
	case pgtype.Int2OID:
		return scanAs[int16](m, oid, format, func(d int16) (any, error) { return int64(d), nil })
	case pgtype.Int4OID:
		return scanAs[int32](m, oid, format, func(d int32) (any, error) { return int64(d), nil })
	case pgtype.Int8OID:
		return scanAs[int64](m, oid, format, func(d int64) (any, error) { return d, nil })
	case pgtype.TimestampOID:
		return scanAs(m, oid, format, func(d pgtype.Timestamp) (any, error) { return d.Value() })
	case pgtype.TimestamptzOID:
		return scanAs(m, oid, format, func(d pgtype.Timestamptz) (any, error) { return d.Value() })
	default:
		return scanAs[string](m, oid, format, func(d string) (any, error) { return d, nil })
	}
}

// scanAs scans a column's values into a T, as pgx plans it for the
// column's type and format, and hands out value(T).
func scanAs[T any](m *pgtype.Map, oid uint32, format int16, value func(T) (any, error)) ValueFunc {
	var d T
	plan := m.PlanScan(oid, format, &d)
	return func(src []byte) (any, error) {
		if err := plan.Scan(src, &d); err != nil {
			return nil, err
		}
		return value(d)
	}
}
