package rebalance

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/internal/pgdsn"
)

// The copy of a shard's rows, as pg_dump and its restore do it: the
// target's tables have no indexes, constraints of their own keys or
// triggers while their rows go in (stripTarget), each table is streamed
// with one binary COPY from the source into a COPY FREEZE on the target, a
// few tables at once, and the keys and indexes are built afterwards from
// sorted data (buildIndexes). An online move reads the source as of the
// snapshot that its replication slot exports when it is created, so that
// the subscription made after the index build starts exactly where the
// copy stopped: nothing is lost or applied twice.

// Statements of the copy.
const (
	// sqlCreateSlotExport runs on a replication connection
	// (replication=database). It returns slot_name, consistent_point,
	// snapshot_name, output_plugin; the snapshot can be imported by other
	// sessions for as long as that connection stays open and idle.
	sqlCreateSlotExport = `CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'export')`
	// sqlCreateSlotExportFailover is the same on PostgreSQL 17 and later,
	// where a slot marked for failover is kept in step on the source's
	// standbys (sync_replication_slots): a promotion keeps the move's slot.
	sqlCreateSlotExportFailover = `CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)`
	// sqlBeginSnapshot starts a source transaction that sees the rows as
	// of an exported snapshot (%s: the validated snapshot name, quoted).
	sqlBeginSnapshot = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT %s`
	sqlBeginRead     = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`
	// sqlStripTarget lists the statements that take out of the target's
	// copy of a schema what the copy builds after the rows: triggers
	// (shardkit's barrier aside), foreign keys, then primary key, unique
	// and exclusion constraints, then the other indexes. A replica
	// identity index and a constraint that owns one stay: a table's
	// replica identity is carried before its rows.
	sqlStripTarget = `SELECT stmt FROM (
  SELECT 1 AS o, g.oid AS id, format('DROP TRIGGER %I ON %I.%I', g.tgname, n.nspname, t.relname) AS stmt
  FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid JOIN pg_namespace n ON n.oid = t.relnamespace
  WHERE n.nspname = $1 AND NOT g.tgisinternal AND g.tgname <> $2
  UNION ALL
  SELECT CASE k.contype WHEN 'f' THEN 2 ELSE 3 END, k.oid, format('ALTER TABLE %I.%I DROP CONSTRAINT %I', n.nspname, t.relname, k.conname)
  FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
  WHERE n.nspname = $1 AND k.contype IN ('f', 'p', 'u', 'x')
    AND NOT coalesce((SELECT x.indisreplident FROM pg_index x WHERE x.indexrelid = k.conindid AND k.contype <> 'f'), false)
  UNION ALL
  SELECT 4, i.oid, format('DROP INDEX %I.%I', n.nspname, i.relname)
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = i.relnamespace
  WHERE n.nspname = $1 AND NOT x.indisreplident
    AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.oid AND k.contype IN ('p', 'u', 'x'))
) s ORDER BY o, id`
	// sqlCopyProgress reads the rows that the COPYs under way into a
	// schema's tables have written so far.
	sqlCopyProgress = `SELECT coalesce(sum(p.tuples_processed), 0)::bigint FROM pg_stat_progress_copy p
	JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())`
)

// snapshotName is what PostgreSQL's exported snapshot names look like
// (0000000A-0000002F-1); the name is checked before it is quoted into SET
// TRANSACTION SNAPSHOT, which takes no bind parameter.
var snapshotName = regexp.MustCompile(`^[0-9A-F]+(-[0-9A-F]+)+$`)

// errSnapshotLost reports a copy whose exported snapshot could not be
// imported by every copying transaction (the replication connection that
// held it went away): the copy is started again from a new slot.
var errSnapshotLost = errors.New("the exported snapshot of the copy is gone")

// exportedSlot is a logical replication slot just created on a
// replication connection, and the snapshot it exported: the rows as of the
// slot's consistent point. The snapshot lives while conn stays open and
// idle.
type exportedSlot struct {
	conn     *pgconn.PgConn
	lsn      string
	snapshot string
}

// createSlotExporting creates a logical slot for pgoutput on the server of
// dsn and keeps its replication connection open, holding the exported
// snapshot. The slot is permanent: the subscription streams from it once
// the copy and the index build are done.
func createSlotExporting(ctx context.Context, dsn string, at *pgdsn.HostPort, slot string) (*exportedSlot, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("create slot %s: the source's DSN: %w", slot, pgdsn.Scrub(err))
	}
	// The slot goes on the host the copy's transactions read from,
	// which import its snapshot.
	pc := pinned(&cfg.Config, at)
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("create slot %s: open a replication connection: %w", slot, err)
	}
	create := sqlCreateSlotExport
	if failoverSlots(conn.ParameterStatus("server_version")) {
		create = sqlCreateSlotExportFailover
	}
	results, err := conn.Exec(ctx, fmt.Sprintf(create, ident(slot))).ReadAll()
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("create slot %s: %w", slot, err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) < 3 {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("create slot %s: unexpected reply to CREATE_REPLICATION_SLOT", slot)
	}
	row := results[0].Rows[0]
	s := &exportedSlot{conn: conn, lsn: string(row[1]), snapshot: string(row[2])}
	if !snapshotName.MatchString(s.snapshot) {
		s.close(ctx)
		return nil, fmt.Errorf("create slot %s: unexpected snapshot name %q", slot, s.snapshot)
	}
	return s, nil
}

// close ends the replication connection, and with it the exported snapshot
// (the slot stays).
func (s *exportedSlot) close(ctx context.Context) {
	if s != nil && s.conn != nil {
		_ = s.conn.Close(context.WithoutCancel(ctx))
		s.conn = nil
	}
}

// stripTarget drops, on the target's copy of a schema, what the copy
// builds after the rows (see sqlStripTarget), in one transaction. A
// stripped schema is left as it is.
func stripTarget(ctx context.Context, tgt *pgxpool.Pool, schema string) error {
	err := pgx.BeginFunc(ctx, tgt, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlStripTarget, schema, barrierName)
		if err != nil {
			return err
		}
		stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(stmts) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, strings.Join(stmts, ";\n"), pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err != nil {
		return fmt.Errorf("take the keys, indexes and triggers off %s on the target before the copy: %w", schema, err)
	}
	return nil
}

// copyTable is one table to copy: its name, its columns (generated ones
// aside: COPY FROM computes those) and its size in pages (to copy the
// largest first).
type copyTable struct {
	name  string
	cols  string // quoted column list, "a, b"
	pages int64
}

// sqlCopyTables lists a schema's tables with their heap pages.
const sqlCopyTables = `SELECT c.relname::text, pg_relation_size(c.oid) / current_setting('block_size')::bigint
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`

func copyTables(ctx context.Context, src *pgxpool.Pool, schema string) ([]copyTable, error) {
	rows, err := src.Query(ctx, sqlCopyTables, schema)
	if err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	var out []copyTable
	var name string
	var pages int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &pages}, func() error {
		out = append(out, copyTable{name: name, pages: pages})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	for i, t := range out {
		rows, err := src.Query(ctx, sqlColumns, ident(schema, t.name))
		if err != nil {
			return nil, fmt.Errorf("columns of %s.%s: %w", schema, t.name, err)
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("columns of %s.%s: %w", schema, t.name, err)
		}
		quoted := make([]string, len(cols))
		for j, c := range cols {
			quoted[j] = ident(c)
		}
		out[i].cols = strings.Join(quoted, ", ")
	}
	return out, nil
}

// copyResult is what a copy moved.
type copyResult struct {
	tables      int
	rows, bytes int64
	slotLSN     string // the slot's consistent point (online copies)
	slotTook    time.Duration
}

// copyRows copies every table of the schema from the source to the
// target, into tables emptied in the same transaction (so a rerun starts
// clean, and COPY FREEZE writes the rows frozen and all-visible: the index
// builds and the first reads after it need not set hint bits on every
// page). With slot set, it first creates that replication slot on the
// source exporting a snapshot, and every copying transaction reads as of
// it; else (offline: the source refuses writes) plain repeatable-read
// transactions. It reports progress every 250 ms.
func (mv *Mover) copyRows(ctx context.Context, mc *moveCtx, slot string) (copyResult, error) {
	var res copyResult
	if err := stripTarget(ctx, mc.tgt, mc.schema); err != nil {
		return res, err
	}
	tables, err := copyTables(ctx, mc.src, mc.schema)
	if err != nil {
		return res, err
	}
	heap, estRows, err := schemaHeap(ctx, mc.src, mc.schema)
	if err != nil {
		return res, err
	}
	res.tables = len(tables)
	workers := min(mv.cfg.CopyWorkers, len(tables))

	srcConns, err := mv.openSourceReads(ctx, mc, slot, workers, &res)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, c := range srcConns {
			c.Release() // a connection still in its transaction is closed by the pool
		}
	}()

	// Largest first, so that a large table does not start last.
	slices.SortStableFunc(tables, func(a, b copyTable) int { return cmp.Compare(b.pages, a.pages) })
	queue := make(chan copyTable, len(tables))
	for _, t := range tables {
		queue <- t
	}
	close(queue)
	var doneRows, doneBytes, streamed atomic.Int64
	var firstTable sync.Once
	g, gctx := errgroup.WithContext(ctx)
	for _, sc := range srcConns {
		g.Go(func() error {
			tc, err := mc.tgt.Acquire(gctx)
			if err != nil {
				return err
			}
			defer tc.Release()
			for t := range queue {
				rows, n, err := streamTable(gctx, sc.Conn().PgConn(), tc.Conn().PgConn(), mc.schema, t, &streamed)
				if err != nil {
					return err
				}
				doneRows.Add(rows)
				doneBytes.Add(n)
				if mv.cfg.hook != nil && slot != "" {
					// Tests kill the mover here: part of the rows are in,
					// and the snapshot they were read from is gone.
					firstTable.Do(func() { mv.cfg.hook(*mc.m, stepCopying, false) })
				}
			}
			_, err = sc.Conn().PgConn().Exec(gctx, "COMMIT").ReadAll()
			return err
		})
	}
	finished := make(chan error, 1)
	go func() { finished <- g.Wait() }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-finished:
			res.rows, res.bytes = doneRows.Load(), doneBytes.Load()
			if err != nil {
				return res, err
			}
			mv.report(mc, "copy", heap, heap, res.rows)
			return res, nil
		case <-tick.C:
			var running int64
			if err := mc.tgt.QueryRow(ctx, sqlCopyProgress, mc.schema).Scan(&running); err != nil {
				continue // progress only; the copy's own errors matter
			}
			rows := doneRows.Load() + running
			done := streamed.Load()
			if estRows > 0 {
				done = int64(float64(heap) * float64(rows) / float64(estRows))
			}
			mv.report(mc, "copy", done, max(heap, 1), rows)
		}
	}
}

// openSourceReads opens workers source transactions that read the schema
// as the copy must: as of the snapshot of a slot it creates (slot set),
// each importing it before the replication connection that holds it is
// closed, or in plain repeatable read (offline: the source refuses
// writes). It records the slot's consistent point in res.
func (mv *Mover) openSourceReads(ctx context.Context, mc *moveCtx, slot string, workers int, res *copyResult) (srcConns []*pgxpool.Conn, err error) {
	var exported *exportedSlot
	if slot != "" {
		start := time.Now()
		exported, err = createSlotExporting(ctx, mc.srcDSN, mc.srcAt, slot)
		if err != nil {
			return nil, err
		}
		defer exported.close(ctx)
		res.slotLSN, res.slotTook = exported.lsn, time.Since(start)
	}
	begin := sqlBeginRead
	if exported != nil {
		begin = fmt.Sprintf(sqlBeginSnapshot, "'"+exported.snapshot+"'")
	}
	defer func() {
		if err != nil {
			for _, c := range srcConns {
				c.Release()
			}
		}
	}()
	for range workers {
		c, err := mc.src.Acquire(ctx)
		if err != nil {
			return srcConns, fmt.Errorf("copy %s: %w", mc.schema, err)
		}
		srcConns = append(srcConns, c)
		if _, err := c.Conn().PgConn().Exec(ctx, begin).ReadAll(); err != nil {
			if exported != nil {
				return srcConns, fmt.Errorf("copy %s: %w: %w", mc.schema, errSnapshotLost, err)
			}
			return srcConns, fmt.Errorf("copy %s: %w", mc.schema, err)
		}
	}
	exported.close(ctx)
	return srcConns, nil
}

// streamTable copies one table from a source connection (inside its
// transaction) to a target connection, in a transaction of its own there,
// which the target's barrier lets through (sqlFilling): the table is
// emptied and the rows written frozen. It returns the rows
// and bytes copied.
func streamTable(ctx context.Context, src, tgt *pgconn.PgConn, schema string, t copyTable, streamed *atomic.Int64) (int64, int64, error) {
	table := ident(schema, t.name)
	cols := " (" + t.cols + ")"
	if _, err := tgt.Exec(ctx, "BEGIN; "+sqlFilling+"; TRUNCATE "+table).ReadAll(); err != nil {
		return 0, 0, fmt.Errorf("copy %s.%s: empty it on the target: %w", schema, t.name, err)
	}
	// The source sends a message per row, and the target's COPY takes a
	// message per read of the pipe: the buffer makes those 60 KiB each
	// (just under pgconn's read buffer) instead of one network write per
	// row.
	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw, total: streamed}
	bw := bufio.NewWriterSize(cw, 60<<10)
	errc := make(chan error, 1)
	go func() {
		_, err := src.CopyTo(ctx, bw, "COPY "+table+cols+" TO STDOUT (FORMAT binary)")
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		errc <- err
	}()
	tag, err := tgt.CopyFrom(ctx, pr, "COPY "+table+cols+" FROM STDIN (FORMAT binary, FREEZE)")
	pr.CloseWithError(err)
	if srcErr := <-errc; srcErr != nil {
		return 0, 0, fmt.Errorf("copy %s.%s out of the source: %w", schema, t.name, srcErr)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("copy %s.%s into the target: %w", schema, t.name, err)
	}
	if _, err := tgt.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		return 0, 0, fmt.Errorf("copy %s.%s: commit on the target: %w", schema, t.name, err)
	}
	return tag.RowsAffected(), cw.n, nil
}

// countingWriter counts bytes on their way through, also into total.
type countingWriter struct {
	w     io.Writer
	n     int64
	total *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.total.Add(int64(n))
	return n, err
}
