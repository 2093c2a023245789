package rebalance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

const sqlReplicaRole = `SET session_replication_role = replica`

// isInsufficientPrivilege reports SQLSTATE 42501.
func isInsufficientPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

const sqlColumns = `SELECT a.attname FROM pg_attribute a
	WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
	ORDER BY a.attnum`

// offline moves a shard without logical replication: fence it, refuse
// writes on the source, COPY each table, verify, carry sequences, flip.
// The shard takes no writes for the whole copy; the fenced time is
// recorded. An offline move is completed at once (nothing to roll back to).
func (mv *Mover) offline(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	fencedAt := time.Now()
	steps := []struct {
		s  Step
		fn func(context.Context) error
	}{
		{StepMapMoving, func(ctx context.Context) error {
			return setMapState(ctx, mv.cfg.Catalog, m.Shard, m.Source, router.StateMoving)
		}},
		{StepTargetSchema, func(ctx context.Context) error { return mv.createTarget(ctx, mc, true) }},
		{StepFenced, func(ctx context.Context) error {
			fencedAt = time.Now()
			return setMapState(ctx, mv.cfg.Catalog, m.Shard, m.Source, router.StateFenced)
		}},
		{StepBarrier, func(ctx context.Context) error {
			lsn, err := installBarrier(ctx, mc.src, mc.schema)
			if err != nil {
				return err
			}
			m.FinalLSN = lsn
			return nil
		}},
		{StepCopiedOff, func(ctx context.Context) error { return mv.copyTables(ctx, mc) }},
		{StepIndexes, func(ctx context.Context) error { return mv.buildIndexes(ctx, mc) }},
		{StepVerified, func(ctx context.Context) error {
			_, err := compareSchemas(ctx, mc.src, mc.tgt, mc.schema)
			return err
		}},
		{StepSequences, func(ctx context.Context) error {
			v, err := carrySequences(ctx, mc.src, mc.tgt, mc.schema, mv.cfg.SequenceMargin)
			if err != nil {
				return err
			}
			m.SeqValue = v
			return waitClockPastNewestID(ctx, mc.tgt, mc.schema, mc.layout)
		}},
		{StepFlipped, func(ctx context.Context) error {
			if err := flipMap(ctx, mv.cfg.Catalog, m.Shard, m.Source, m.Target); err != nil {
				return err
			}
			m.FencedFor = time.Since(fencedAt)
			return nil
		}},
	}
	for _, st := range steps {
		if err := mv.step(ctx, mc, st.s, st.fn); err != nil {
			return err
		}
	}
	if err := mv.record(ctx, m, StepCleaned, "", func(ctx context.Context) error {
		return mv.dropReplication(ctx, mc, true)
	}); err != nil {
		return err
	}
	if err := mv.setState(ctx, m, StateCompleted); err != nil {
		return err
	}
	mv.log.Info("shardkit: offline move done", "move", m.ID, "shard", m.Shard, "fenced", m.FencedFor)
	return nil
}

// copyTables copies every table of the schema from source to target with
// binary COPY, emptying the target's table first (so a rerun is safe).
func (mv *Mover) copyTables(ctx context.Context, mc *moveCtx) error {
	tables, err := listTables(ctx, mc.src, mc.schema)
	if err != nil {
		return err
	}
	total, _, err := schemaHeap(ctx, mc.src, mc.schema)
	if err != nil {
		return err
	}
	// Every table is emptied first, in one statement: foreign keys
	// between them forbid emptying one at a time, and a rerun starts clean.
	if len(tables) > 0 {
		quoted := make([]string, len(tables))
		for i, t := range tables {
			quoted[i] = ident(mc.schema, t)
		}
		if _, err := mc.tgt.Exec(ctx, "TRUNCATE "+strings.Join(quoted, ", ")); err != nil {
			return fmt.Errorf("empty the tables of %s on the target: %w", mc.schema, err)
		}
	}
	var done int64
	for _, t := range tables {
		n, err := copyTable(ctx, mc.src, mc.tgt, mc.schema, t)
		if err != nil {
			return err
		}
		done += n
		mv.report(mc, "copy", done, max(total, done), 0)
	}
	return nil
}

// countingWriter counts bytes on their way through.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func copyTable(ctx context.Context, src, tgt *pgxpool.Pool, schema, table string) (int64, error) {
	rows, err := src.Query(ctx, sqlColumns, ident(schema, table))
	if err != nil {
		return 0, fmt.Errorf("columns of %s.%s: %w", schema, table, err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("columns of %s.%s: %w", schema, table, err)
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = ident(c)
	}
	target := ident(schema, table) + " (" + strings.Join(quoted, ", ") + ")"
	sc, err := src.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer sc.Release()
	tc, err := tgt.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer tc.Release()
	// As a replica, the target checks no foreign key and fires no trigger
	// of the copied rows (logical replication's apply does the same): the
	// rows arrive as they are on the source, in any table order. It needs
	// a superuser; without, the preflight refused a schema with foreign
	// keys or triggers.
	if _, err := tc.Exec(ctx, sqlReplicaRole); err != nil && !isInsufficientPrivilege(err) {
		return 0, fmt.Errorf("copy %s.%s: %w", schema, table, err)
	}
	defer func() {
		if _, err := tc.Exec(context.WithoutCancel(ctx), "RESET session_replication_role"); err != nil {
			_ = tc.Conn().Close(context.WithoutCancel(ctx)) // never back to the pool as a replica
		}
	}()
	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	errc := make(chan error, 1)
	go func() {
		_, err := sc.Conn().PgConn().CopyTo(ctx, cw, "COPY "+target+" TO STDOUT (FORMAT binary)")
		pw.CloseWithError(err)
		errc <- err
	}()
	_, err = tc.Conn().PgConn().CopyFrom(ctx, pr, "COPY "+target+" FROM STDIN (FORMAT binary)")
	pr.CloseWithError(err)
	if srcErr := <-errc; srcErr != nil {
		return 0, fmt.Errorf("copy %s.%s out of the source: %w", schema, table, srcErr)
	}
	if err != nil {
		return 0, fmt.Errorf("copy %s.%s into the target: %w", schema, table, err)
	}
	return cw.n, nil
}
