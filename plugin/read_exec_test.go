package plugin

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/plugin/internal/readexec"
)

// The tests of the execute stage run it through the plugin's own
// connector (prepared reads, plan generations), with these shorthands.

// pipeStmt is one statement of a server's pipeline (readexec.PipeStmt).
type pipeStmt struct {
	sql    string
	vars   []any
	filter *pageFilter
	unit   int
}

// stageConfig is the stage's configuration with the plugin's defaults
// and no statement bound.
var stageConfig = readexec.Config{Conn: pgxOf, AsPrepared: asPrepared, PerConn: preparedReadsPerConn}

// readPipelined runs stmts as readexec.ReadPipelined does.
func readPipelined(ctx context.Context, db *sql.DB, stmts []pipeStmt, bound time.Duration, answer func(i int, pt partials, err error) bool) {
	ps := make([]readexec.PipeStmt, len(stmts))
	for i, st := range stmts {
		ps[i] = readexec.PipeStmt{SQL: st.sql, Vars: st.vars, Unit: st.unit}
		if st.filter != nil {
			ps[i].Filter = st.filter
		}
	}
	readexec.ReadPipelined(&stageConfig, ctx, db, ps, bound, func(i int, pt readexec.Partials, err error) bool {
		return answer(i, fromExec(pt), err)
	})
}

// readNamed runs text as readexec.ReadNamed does.
func readNamed(ctx context.Context, db *sql.DB, text string, vars []any, f *pageFilter, u int) (partials, error) {
	var rf readexec.Filter
	if f != nil {
		rf = f
	}
	pt, err := readexec.ReadNamed(&stageConfig, ctx, db, text, vars, rf, u)
	return fromExec(pt), err
}

// columnsOf is readexec.ColumnsOf.
func columnsOf(cts []*sql.ColumnType) []memrows.Column { return readexec.ColumnsOf(cts) }

// describeColumns is readexec.DescribeColumns.
func describeColumns(m *pgtype.Map, fds []pgconn.FieldDescription) ([]memrows.Column, []valueFunc) {
	return readexec.DescribeColumns(m, fds)
}
