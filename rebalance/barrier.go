package rebalance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

// barrierName names the trigger and its function that refuse writes on the
// old home of a shard.
const barrierName = "shardkit_fence"

const (
	sqlTables = `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`
	sqlSchemaOK = `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`
	// The barrier commits synchronously: a logical walsender sends WAL only
	// once it is flushed, and with asynchronous commit the writes before the
	// barrier would reach the target only at the WAL writer's next round
	// (wal_writer_delay, 200 ms by default), all inside the fenced window.
	sqlLockWait  = `SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = on`
	sqlBarrierOn = `SELECT pg_current_wal_insert_lsn()::text`
	// The fence function's body names the SQLSTATE shared with the plugin.
	// This barrier has no lease (an offline move's, held for the copy).
	sqlFenceFunc = `CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'shardkit: shard schema %% has moved to another server; reload the shard map and retry there', TG_TABLE_SCHEMA
        USING ERRCODE = '` + router.FenceSQLState + `';
END $fn$`
	sqlFenceTrigger = `CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s
    FOR EACH STATEMENT EXECUTE FUNCTION %s()`

	// sqlTargetFenceFunc is the barrier of a move's target, from the
	// moment its tables exist until the flip makes it the shard's home:
	// it refuses every write but the move's own copy (whose transactions
	// set shardkit.filling), with the fence's SQLSTATE, so that a router
	// whose map still places the shard on this server from an earlier move
	// reloads instead of writing rows that a rollback would drop with the
	// copy. The apply worker skips triggers.
	sqlTargetFenceFunc = `CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('shardkit.filling', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'shardkit: shard schema %% is being moved to this server and is not its home yet; reload the shard map and retry there', TG_TABLE_SCHEMA
        USING ERRCODE = '` + router.FenceSQLState + `';
END $fn$`
	// sqlFilling marks a transaction of the move's copy into its target.
	sqlFilling = `SET LOCAL shardkit.filling = 'on'`
)

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func listTables(ctx context.Context, q querier, schema string) ([]string, error) {
	rows, err := q.Query(ctx, sqlTables, schema)
	if err != nil {
		return nil, fmt.Errorf("list tables of %s: %w", schema, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func schemaExists(ctx context.Context, q querier, schema string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, sqlSchemaOK, schema).Scan(&ok)
	return ok, err
}

// installBarrier makes every table of schema refuse writes with
// router.FenceSQLState, and returns the WAL position captured in the same
// transaction. The triggers' locks wait for writes in flight, so every write
// that committed did so before the returned LSN; every later one fails.
// Triggers fire for ordinary sessions only: the logical replication apply
// worker runs as a replica (session_replication_role) and skips them, so a
// barriered schema can still receive reverse replication.
func installBarrier(ctx context.Context, p *pgxpool.Pool, schema string) (string, error) {
	var lsn string
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		tables, err := listTables(ctx, tx, schema)
		if err != nil {
			return err
		}
		// One simple-protocol round trip for all the DDL.
		stmts := append([]string{sqlLockWait, fmt.Sprintf(sqlFenceFunc, ident(schema, barrierName))}, fenceTriggers(schema, tables)...)
		if _, err := tx.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlBarrierOn).Scan(&lsn)
	})
	if err != nil {
		return "", fmt.Errorf("install write barrier on %s: %w", schema, err)
	}
	return lsn, nil
}

// fenceTriggers is the barrier's trigger on each of schema's tables,
// calling its function (schema.barrierName): one statement a table.
func fenceTriggers(schema string, tables []string) []string {
	fn := ident(schema, barrierName)
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = fmt.Sprintf(sqlFenceTrigger, ident(barrierName), ident(schema, t), fn)
	}
	return out
}

// fenceTarget puts the target's barrier (sqlTargetFenceFunc) on every
// table of schema, in tx: the transaction that creates them, so that no
// write but the move's lands in the target's copy before the flip. The
// flip removes it (cutoverPlan.removeOnTo; an offline move's flip step).
func fenceTarget(ctx context.Context, tx pgx.Tx, schema string) error {
	tables, err := listTables(ctx, tx, schema)
	if err != nil {
		return err
	}
	stmts := append([]string{fmt.Sprintf(sqlTargetFenceFunc, ident(schema, barrierName))}, fenceTriggers(schema, tables)...)
	if _, err := tx.Exec(ctx, strings.Join(stmts, ";\n"), pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("put the write barrier on %s on the target: %w", schema, err)
	}
	return nil
}

// removeBarrier lets the schema take writes again. A missing schema or
// barrier is not an error.
func removeBarrier(ctx context.Context, p *pgxpool.Pool, schema string) error {
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		tables, err := listTables(ctx, tx, schema)
		if err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS "+ident(barrierName)+" ON "+ident(schema, t)); err != nil {
				return err
			}
		}
		if ok, err := schemaExists(ctx, tx, schema); err != nil || !ok {
			return err
		}
		_, err = tx.Exec(ctx, "DROP FUNCTION IF EXISTS "+ident(schema, barrierName)+"()")
		return err
	})
	if err != nil {
		return fmt.Errorf("remove write barrier on %s: %w", schema, err)
	}
	return nil
}

// A barrier as one round trip (the cutover's fenced window): the statements
// go as one simple-protocol query, which PostgreSQL runs as one implicit
// transaction, so SET LOCAL holds to its end and a failure rolls all back.
// The schema is set as search_path (an identifier, quoted), and the result
// names it back, so a barrier that ran elsewhere cannot pass unnoticed.
const (
	sqlBarrierSettings = `SET LOCAL lock_timeout = '%dms'; SET LOCAL synchronous_commit = on; SET LOCAL search_path = %s`
	// The insert position, not pg_current_wal_lsn() (the write position):
	// with asynchronous commit a write acknowledged just before the barrier
	// may have its commit record in WAL buffers only, past the write
	// position, and a final LSN before it would let the flip (and a
	// rollback's cleanup) come before the replica applied that write. The
	// barrier's synchronous commit flushes everything up to it.
	sqlBarrierLSN = `SELECT current_schema()::text, pg_current_wal_insert_lsn()::text`
)

// barrierResult is what the barrier statement returns: the final WAL
// position, the schema's sequences and its newest ID, all read after every
// table's trigger was in place (no write commits after them).
type barrierResult struct {
	lsn      string
	names    []string
	vals     []int64
	newestID int64 // 0 when the schema has no row with an id
}

// barrierStmt is a cutover's barrier, built before the fenced window.
type barrierStmt struct {
	sql    string   // the barrier, for runBarrier
	warm   string   // its reads alone, run on the window's connection beforehand
	tables []string // the schema's tables
}

// barrierSQL builds the barrier statement of schema from its tables and
// sequences, and creates the trigger function, before the fenced window.
// The barrier is attempt token's, with a fence lease of lease (fence.go).
func barrierSQL(ctx context.Context, p *pgxpool.Pool, schema string, lockWait time.Duration, token string, lease time.Duration, role string) (barrierStmt, error) {
	tables, err := listTables(ctx, p, schema)
	if err != nil {
		return barrierStmt{}, err
	}
	if len(tables) == 0 {
		return barrierStmt{}, fmt.Errorf("install write barrier on %s: the schema has no tables", schema)
	}
	// The triggers go in before the window, with a function that lets
	// every write through; inside the window the barrier only locks the
	// tables (waiting for running writes) and replaces the function's body
	// with one that refuses until the lease's deadline: no DDL on the
	// tables there. A write that gets its table lock after the barrier
	// committed sees the new body (taking the lock processes the
	// invalidation). A sealed barrier is never replaced here.
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = ident(schema, t)
	}
	pre := []string{"LOCK TABLE " + strings.Join(quoted, ", ") + " IN SHARE ROW EXCLUSIVE MODE",
		fenceSQL(sqlFencePrepCheck, schema, token, 0), fenceSQL(sqlFenceBodyPass, schema, token, 0)}
	pre = append(pre, fenceTriggers(schema, tables)...)
	// Creating a trigger takes the same lock as the barrier: it waits for
	// running writes and holds new ones behind it. So it waits at most
	// lockWait per try, like the barrier, and tries again.
	preSQL := fmt.Sprintf("SET LOCAL lock_timeout = '%dms';\n", max(lockWait.Milliseconds(), 1)) + strings.Join(pre, ";\n")
	for {
		_, err := p.Exec(ctx, preSQL, pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if err == nil {
			break
		}
		if errors.As(err, &pe) && pe.Code == fenceLapsedSQLState {
			return barrierStmt{}, fmt.Errorf("prepare the write barrier on %s: %w: %s", schema, errFenceLapsed, pe.Message)
		}
		if !errors.As(err, &pe) || pe.Code != "55P03" {
			return barrierStmt{}, fmt.Errorf("prepare the write barrier on %s: %w", schema, err)
		}
		if err := sleep(ctx, lockWait); err != nil {
			return barrierStmt{}, fmt.Errorf("prepare the write barrier on %s: running writes kept its locks: %w", schema, err)
		}
	}
	stmts := []string{sqlBarrierSettings, "LOCK TABLE " + strings.Join(quoted, ", ") + " IN SHARE ROW EXCLUSIVE MODE",
		fenceSQL(sqlFenceLease, schema, token, lease)}
	// The application role loses the schema in the same transaction:
	// from the final LSN on, a stale router's reads are refused too.
	revoke, err := homeSQL(ctx, p, role, schema, false)
	if err != nil {
		return barrierStmt{}, err
	}
	if revoke != "" {
		stmts = append(stmts, revoke)
	}
	newest, err := newestIDSQL(ctx, p, schema)
	if err != nil {
		return barrierStmt{}, err
	}
	seqs, err := sequenceValuesSQL(ctx, p, schema)
	if err != nil {
		return barrierStmt{}, err
	}
	stmts = append(stmts, sqlBarrierLSN, seqs, newest)
	return barrierStmt{sql: strings.Join(stmts, ";\n"), warm: seqs + ";\n" + newest, tables: tables}, nil
}

// warmWindowConn runs the barrier's reads on a connection the fenced
// window will use, so that the window's statements there do not load the
// catalog entries of the schema's tables, indexes and sequences into a
// fresh backend's caches. On the replica it warms what the carry of the
// sequences looks up. It returns the sequences' values it read.
func warmWindowConn(ctx context.Context, conn *pgxpool.Conn, b barrierStmt) (names []string, vals []int64, err error) {
	results, err := conn.Conn().PgConn().Exec(ctx, b.warm).ReadAll()
	if err == nil && len(results) != 2 {
		err = fmt.Errorf("unexpected reply (%d results)", len(results))
	}
	if err == nil {
		names, vals, err = parseSequences(results[0])
	}
	if err != nil {
		return nil, nil, fmt.Errorf("prepare the fenced window's connection: %w", err)
	}
	return names, vals, nil
}

// runBarrier runs a statement built by barrierSQL and commits it. A lock
// it waits for longer than lockTimeout (a write transaction still
// running) fails it with SQLSTATE 55P03, and nothing is installed.
func runBarrier(ctx context.Context, conn *pgxpool.Conn, schema, sql string, lockTimeout time.Duration) (barrierResult, error) {
	res, err := openBarrier(ctx, conn, schema, sql, lockTimeout)
	if err != nil {
		return res, err
	}
	return res, commitBarrier(ctx, conn, schema)
}

// openBarrier runs a statement built by barrierSQL in one round trip,
// inside a transaction it leaves open: the tables' locks are held and the
// refusing body is in place, but no other session sees it until
// commitBarrier. So the cutover can take the locks and read the final
// position while the catalog fences the shard, and still make the
// barrier visible only after the fence (a write it refuses then finds
// the shard fenced when it reloads the map). On an error the
// transaction is rolled back: nothing is installed.
func openBarrier(ctx context.Context, conn *pgxpool.Conn, schema, sql string, lockTimeout time.Duration) (barrierResult, error) {
	var res barrierResult
	sql = "BEGIN;\n" + strings.Replace(sql, sqlBarrierSettings, fmt.Sprintf(sqlBarrierSettings, max(lockTimeout.Milliseconds(), 1), ident(schema)), 1)
	results, err := conn.Conn().PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		rollbackBarrier(ctx, conn)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == fenceLapsedSQLState {
		return res, fmt.Errorf("install write barrier on %s: %w: %s", schema, errFenceLapsed, pe.Message)
	}
	if err != nil {
		return res, fmt.Errorf("install write barrier on %s: %w", schema, err)
	}
	res, err = parseBarrier(schema, results)
	if err != nil {
		rollbackBarrier(ctx, conn)
	}
	return res, err
}

// commitBarrier commits a barrier openBarrier left open, synchronously
// (the statement set synchronous_commit).
func commitBarrier(ctx context.Context, conn *pgxpool.Conn, schema string) error {
	results, err := conn.Conn().PgConn().Exec(ctx, "COMMIT").ReadAll()
	if err != nil {
		return fmt.Errorf("install write barrier on %s: commit: %w", schema, err)
	}
	// A transaction that failed in the meantime ends in ROLLBACK, silently.
	if len(results) != 1 || results[0].CommandTag.String() != "COMMIT" {
		return fmt.Errorf("install write barrier on %s: the transaction was rolled back before its commit", schema)
	}
	return nil
}

// rollbackBarrier ends a barrier's transaction without installing it. A
// connection it cannot roll back is closed (the pool drops it, and
// Postgres rolls back a closed session's transaction).
func rollbackBarrier(ctx context.Context, conn *pgxpool.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Conn().PgConn().Exec(rctx, "ROLLBACK").ReadAll(); err != nil {
		_ = conn.Conn().PgConn().Close(rctx)
	}
}

// parseBarrier reads the barrier statement's results: its last three are
// the schema and final position, the sequences and the newest ID.
func parseBarrier(schema string, results []*pgconn.Result) (barrierResult, error) {
	var res barrierResult
	n := len(results)
	if n < 3 || len(results[n-3].Rows) != 1 || len(results[n-1].Rows) != 1 {
		return res, fmt.Errorf("install write barrier on %s: unexpected reply (%d results)", schema, n)
	}
	row := results[n-3].Rows[0]
	if got := string(row[0]); got != schema {
		return res, fmt.Errorf("install write barrier on %s: ran with current_schema %q", schema, got)
	}
	res.lsn = string(row[1])
	var err error
	if res.newestID, err = strconv.ParseInt(string(results[n-1].Rows[0][0]), 10, 64); err != nil {
		return res, fmt.Errorf("install write barrier on %s: newest id: %w", schema, err)
	}
	if res.names, res.vals, err = parseSequences(results[n-2]); err != nil {
		return res, fmt.Errorf("install write barrier on %s: %w", schema, err)
	}
	return res, nil
}

// removeBarrierSQL drops the barrier of schema's tables (listed beforehand)
// in one round trip.
func removeBarrierSQL(schema string, tables []string) string {
	stmts := make([]string, 0, len(tables)+1)
	for _, t := range tables {
		stmts = append(stmts, "DROP TRIGGER IF EXISTS "+ident(barrierName)+" ON "+ident(schema, t))
	}
	stmts = append(stmts, "DROP FUNCTION IF EXISTS "+ident(schema, barrierName)+"()")
	return strings.Join(stmts, ";\n")
}
