package rebalance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// barrierName names the trigger and its function that refuse writes on the
// old home of a shard.
const barrierName = "shardkit_fence"

const (
	sqlTables = `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`
	sqlIDTables = `SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.atttypid = 'int8'::regtype ORDER BY c.relname`
	sqlSequences = `SELECT sequencename, coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename`
	// sqlCarry sets each named sequence of schema $1 to value + $4, or
	// leaves it where it is if that is higher already.
	sqlCarry = `SELECT max(setval(q.seq, greatest(u.val + $4, coalesce(pg_sequence_last_value(q.seq), 0)), true))
		FROM unnest($2::text[], $3::bigint[]) AS u(name, val),
		LATERAL (SELECT format('%I.%I', $1::text, u.name)::regclass AS seq) q`
	sqlClockMsExpr = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	sqlSchemaOK    = `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`
	// The barrier commits synchronously: a logical walsender sends WAL only
	// once it is flushed, and with asynchronous commit the writes before the
	// barrier would reach the target only at the WAL writer's next round
	// (wal_writer_delay, 200 ms by default), all inside the fenced window.
	sqlLockWait  = `SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = on`
	sqlBarrierOn = `SELECT pg_current_wal_lsn()::text`
	// The fence function's body names the SQLSTATE shared with the plugin.
	sqlFenceFunc = `CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'shardkit: shard schema %% has moved to another server; reload the shard map and retry there', TG_TABLE_SCHEMA
        USING ERRCODE = '` + router.FenceSQLState + `';
END $fn$`
	sqlFenceTrigger = `CREATE OR REPLACE TRIGGER %s BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s
    FOR EACH STATEMENT EXECUTE FUNCTION %s()`
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
		fn := ident(schema, barrierName)
		stmts := []string{sqlLockWait, fmt.Sprintf(sqlFenceFunc, fn)}
		for _, t := range tables {
			stmts = append(stmts, fmt.Sprintf(sqlFenceTrigger, ident(barrierName), ident(schema, t), fn))
		}
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

// carrySequences sets every sequence of schema on to past its value on
// from: last_value plus margin (never lowering it). IDs hold only part of
// the sequence, so max(id) would not do. It returns the largest value set.
// One round trip to each side: it runs inside the fenced window.
func carrySequences(ctx context.Context, from, to *pgxpool.Pool, schema string, margin int64) (int64, error) {
	rows, err := from.Query(ctx, sqlSequences, schema)
	if err != nil {
		return 0, fmt.Errorf("read sequences of %s: %w", schema, err)
	}
	var names []string
	var vals []int64
	var name string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &v}, func() error {
		names, vals = append(names, name), append(vals, v)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("read sequences of %s: %w", schema, err)
	}
	if len(names) == 0 {
		return 0, nil
	}
	var top int64
	if err := to.QueryRow(ctx, sqlCarry, schema, names, vals, margin).Scan(&top); err != nil {
		return 0, fmt.Errorf("carry sequences of %s: %w", schema, err)
	}
	return top, nil
}

// waitClockPastNewestID waits until the server's clock is past the
// millisecond of the newest ID in the schema, so an ID the server makes
// next cannot sort before (or collide with) one made on the old home.
func waitClockPastNewestID(ctx context.Context, p *pgxpool.Pool, schema string, layout idgen.Layout) error {
	rows, err := p.Query(ctx, sqlIDTables, schema)
	if err != nil {
		return fmt.Errorf("list id tables of %s: %w", schema, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list id tables of %s: %w", schema, err)
	}
	parts := []string{"SELECT 0::bigint"}
	for _, t := range tables {
		parts = append(parts, "SELECT max(id) FROM "+ident(schema, t))
	}
	q := "SELECT coalesce(max(x), 0), " + sqlClockMsExpr + " FROM (" + strings.Join(parts, " UNION ALL ") + ") AS m(x)"
	for {
		var id, now int64
		if err := p.QueryRow(ctx, q).Scan(&id, &now); err != nil {
			return fmt.Errorf("newest id of %s: %w", schema, err)
		}
		newest := int64(0)
		if id > 0 {
			newest = layout.UnixMsOf(id)
		}
		if now > newest {
			return nil
		}
		if err := sleep(ctx, time.Duration(newest-now+1)*time.Millisecond); err != nil {
			return err
		}
	}
}
