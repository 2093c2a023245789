package rebalance

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
)

// A move carries a shard's sequences by last_value, not max(id): an ID
// holds only the sequence's value mod 1024. The target's sequences go past
// the source's by a margin, and the target's clock must be past the
// newest ID's millisecond before it makes IDs of its own.

const (
	sqlSequences = `SELECT sequencename, coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = $1 ORDER BY sequencename`
	// sqlCarry sets each named sequence of schema $1 to value + $4, or
	// leaves it where it is if that is higher already.
	sqlCarry = `SELECT max(setval(q.seq, greatest(u.val + $4, coalesce(pg_sequence_last_value(q.seq), 0)), true))
		FROM unnest($2::text[], $3::bigint[]) AS u(name, val),
		LATERAL (SELECT format('%I.%I', $1::text, u.name)::regclass AS seq) q`
	sqlClockMsExpr = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	sqlIDTables    = `SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.atttypid = 'int8'::regtype ORDER BY c.relname`
)

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

// sequenceValuesSQL builds a query for the last values of schema's
// sequences, named one by one: inside the fenced window a read of
// pg_sequences filtered by schema scans the catalog of every shard on the
// server, tens of ms on a busy server with thousands of shards, against
// well under a millisecond by name. The names are listed here, before the window; a
// sequence made after that (DDL during a move, which logical replication
// does not carry either) is not carried, and Verify reports the schemas'
// difference; one dropped fails the barrier, which then lets writes
// through again.
func sequenceValuesSQL(ctx context.Context, p *pgxpool.Pool, schema string) (string, error) {
	rows, err := p.Query(ctx, sqlSequences, schema)
	if err != nil {
		return "", fmt.Errorf("list sequences of %s: %w", schema, err)
	}
	var parts []string
	var name string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &v}, func() error {
		parts = append(parts, "SELECT "+quoteLiteral(name)+"::text, coalesce(pg_sequence_last_value("+
			quoteLiteral(ident(schema, name))+"::regclass), 0)::text")
		return nil
	}); err != nil {
		return "", fmt.Errorf("list sequences of %s: %w", schema, err)
	}
	if len(parts) == 0 {
		return "SELECT NULL::text, NULL::text WHERE false", nil
	}
	return strings.Join(parts, " UNION ALL "), nil
}

// parseSequences reads the rows of a query built by sequenceValuesSQL.
func parseSequences(r *pgconn.Result) (names []string, vals []int64, err error) {
	for _, row := range r.Rows {
		v, err := strconv.ParseInt(string(row[1]), 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("sequence %s: %w", row[0], err)
		}
		names, vals = append(names, string(row[0])), append(vals, v)
	}
	return names, vals, nil
}

// idMaxesSQL builds `SELECT 0 UNION ALL SELECT max(id) FROM …` over the
// schema's tables with a bigint id column.
func idMaxesSQL(ctx context.Context, p *pgxpool.Pool, schema string) (string, error) {
	rows, err := p.Query(ctx, sqlIDTables, schema)
	if err != nil {
		return "", fmt.Errorf("list id tables of %s: %w", schema, err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("list id tables of %s: %w", schema, err)
	}
	parts := []string{"SELECT 0::bigint"}
	for _, t := range tables {
		parts = append(parts, "SELECT max(id) FROM "+ident(schema, t))
	}
	return strings.Join(parts, " UNION ALL "), nil
}

// newestIDSQL builds a query for the largest id over the schema's tables
// with a bigint id column (0 when none has a row).
func newestIDSQL(ctx context.Context, p *pgxpool.Pool, schema string) (string, error) {
	maxes, err := idMaxesSQL(ctx, p, schema)
	if err != nil {
		return "", err
	}
	return "SELECT coalesce(max(x), 0)::text FROM (" + maxes + ") AS m(x)", nil
}

// sqlCarryClock sets each named sequence of schema $1 to value + $4 unless
// it is higher already, and returns the largest value set and the server's
// clock, in one round trip.
const sqlCarryClock = `SELECT coalesce((SELECT max(setval(q.seq, greatest(u.val + $4, coalesce(pg_sequence_last_value(q.seq), 0)), true))
		FROM unnest($2::text[], $3::bigint[]) AS u(name, val),
		LATERAL (SELECT format('%I.%I', $1::text, u.name)::regclass AS seq) q), 0), ` + sqlClockMsExpr

// carriedClock is the replica's state after carryClock: the largest
// sequence value set, the value each named sequence is at least at, and a
// reading of its clock with the local time it arrived.
type carriedClock struct {
	top     int64
	atLeast map[string]int64
	clockMs int64     // the replica's clock, read before at
	at      time.Time // local time the reading arrived
}

// carryClock sets the replica's sequences to the values read on the
// serving side plus margin (unless higher already) and reads its clock. It
// needs nothing the replica has yet to apply: the cutover runs it before
// the fence with twice the margin (precarry), and in the window, while the
// replica applies the final LSN, only if that was not enough.
func carryClock(ctx context.Context, to *pgxpool.Conn, schema string, names []string, vals []int64, margin int64) (carriedClock, error) {
	c := carriedClock{atLeast: make(map[string]int64, len(names))}
	if names == nil {
		names, vals = []string{}, []int64{}
	}
	err := to.QueryRow(ctx, sqlCarryClock, pgx.QueryExecModeExec, schema, names, vals, margin).Scan(&c.top, &c.clockMs)
	if err != nil {
		return c, fmt.Errorf("carry sequences of %s: %w", schema, err)
	}
	c.at = time.Now()
	for i, name := range names {
		c.atLeast[name] = vals[i] + margin
	}
	return c, nil
}

// covers reports whether the replica's sequences, as c left them, are
// already at or past the barrier's final values plus margin: then the
// fenced window carries nothing. A sequence c did not set (made since)
// is not covered.
func (c carriedClock) covers(b barrierResult, margin int64) bool {
	if c.at.IsZero() {
		return false
	}
	for i, name := range b.names {
		v, ok := c.atLeast[name]
		if !ok || b.vals[i] > v-margin {
			return false
		}
	}
	return true
}

// clockPast waits until the replica's clock, as estimated from the reading
// carryClock took (it can only have advanced since), is past ms.
func (c carriedClock) clockPast(ctx context.Context, ms int64) error {
	ahead := ms - (c.clockMs + time.Since(c.at).Milliseconds())
	if ahead < 0 {
		return nil
	}
	if err := sleep(ctx, time.Duration(ahead+1)*time.Millisecond); err != nil {
		return fmt.Errorf("wait for the clock to pass the newest ID (%d ms): %w", ms, err)
	}
	return nil
}
