package rebalance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/rowsum"
)

// TableSum is one table's row count and checksum on both sides.
type TableSum struct {
	Table                  string
	SourceRows, TargetRows int64
	SourceSum, TargetSum   string
}

// Equal reports whether both sides agree.
func (t TableSum) Equal() bool {
	return t.SourceRows == t.TargetRows && t.SourceSum == t.TargetSum
}

// tableSum counts and checksums one table (internal/rowsum: the same sum
// as a backup's), in a read-only transaction under rowsum's settings, so
// that servers configured differently agree on the same rows.
func tableSum(ctx context.Context, p *pgxpool.Pool, schema, table string) (int64, string, error) {
	var n int64
	var sum string
	err := pgx.BeginTxFunc(ctx, p, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, rowsum.Settings); err != nil {
			return err
		}
		return tx.QueryRow(ctx, rowsum.Query(schema, table)).Scan(&n, &sum)
	})
	if err != nil {
		return 0, "", fmt.Errorf("checksum %s.%s: %w", schema, table, err)
	}
	return n, sum, nil
}

// compareSchemas counts and checksums every table of schema on both
// servers. It returns the sums and, if any table differs, a *mismatchError
// for the first that does.
func compareSchemas(ctx context.Context, src, tgt *pgxpool.Pool, schema string) ([]TableSum, error) {
	tables, err := listTables(ctx, src, schema)
	if err != nil {
		return nil, err
	}
	out := make([]TableSum, 0, len(tables))
	var first error
	for _, t := range tables {
		s := TableSum{Table: t}
		if s.SourceRows, s.SourceSum, err = tableSum(ctx, src, schema, t); err != nil {
			return out, err
		}
		if s.TargetRows, s.TargetSum, err = tableSum(ctx, tgt, schema, t); err != nil {
			return out, err
		}
		out = append(out, s)
		if !s.Equal() && first == nil {
			first = &mismatchError{Schema: schema, Table: t, SourceRows: s.SourceRows, TargetRows: s.TargetRows,
				SourceSum: s.SourceSum, TargetSum: s.TargetSum}
		}
	}
	return out, first
}

// Verify compares the two copies of a shard with an unfinished move: per
// table row counts and checksums on the source and the target. It first
// waits for replication to catch up with the serving side, and retries a
// few times, since the serving side may be taking writes; a persistent
// difference is a *MoveError of Kind ErrMismatch naming the table.
// Once the target's indexes are built it first compares the schemas'
// objects (tables, columns, indexes, constraints, sequences, views,
// functions, triggers): a difference is ErrMismatch too, naming them.
// Config.StepTimeout bounds it (ErrStopped past it).
func (mv *Mover) Verify(ctx context.Context, shard int) (sums []TableSum, err error) {
	defer asMoveError(&err, shard)
	err = mv.bounded(ctx, fmt.Sprintf("verify shard %d", shard), func(ctx context.Context) error {
		sums, err = mv.verify(ctx, shard)
		return err
	})
	return sums, err
}

func (mv *Mover) verify(ctx context.Context, shard int) ([]TableSum, error) {
	m, err := mv.j.open(ctx, shard)
	if err != nil {
		return nil, err
	}
	mc, err := mv.prepare(ctx, &m)
	if err != nil {
		return nil, err
	}
	if mc.done(stepIndexes) {
		// Objects first: the checksums compare tables' rows; views,
		// indexes, sequences and functions only exist or not.
		if err := sameObjects(ctx, nil, mc.src, mc.tgt, mc.schema, mc.role); err != nil {
			return nil, err
		}
	}
	var sums []TableSum
	for attempt := 0; attempt < 5; attempt++ {
		if err := mv.waitReplicated(ctx, mc); err != nil {
			return nil, err
		}
		sums, err = compareSchemas(ctx, mc.src, mc.tgt, mc.schema)
		if !errors.Is(err, ErrMismatch) {
			return sums, err
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("verify: wait before comparing again: %w", err)
		}
	}
	return sums, err
}

// servingServer is the server the catalog's map places the move's shard
// on now: the move's source or target, or another server once the shard
// has moved on.
func (mv *Mover) servingServer(ctx context.Context, mc *moveCtx) (string, error) {
	snap, err := mv.cfg.Catalog.Operator().Load(ctx)
	if err != nil {
		return "", err
	}
	p, err := snap.Placement(mc.m.Shard)
	if err != nil {
		return "", err
	}
	return p.Server, nil
}

// waitReplicated waits until the replica side of a move has confirmed the
// serving side's current WAL position (whichever direction is running).
func (mv *Mover) waitReplicated(ctx context.Context, mc *moveCtx) error {
	server, err := mv.servingServer(ctx, mc)
	if err != nil {
		return err
	}
	serving, slot := mc.src, mc.n.fwd
	if server == mc.m.Target {
		serving, slot = mc.tgt, mc.n.rev
	}
	var exists bool
	if err := serving.QueryRow(ctx, sqlSlotExists, slot).Scan(&exists); err != nil || !exists {
		return err // no replication running (offline move): compare as is
	}
	// A probe written and flushed now, as the lag gate uses: the
	// servers may commit asynchronously, and a walsender sends only WAL
	// that is flushed.
	err = mv.nudger(mc, mc.src, mc.tgt).during(ctx, func() error {
		_, err := waitCurrent(ctx, serving, slot, time.Minute)
		return err
	})
	if errors.Is(err, errCutoverTimeout) {
		return fmt.Errorf("shardkit: verify: replication slot %s did not catch up within a minute (%w); check the subscription's worker in the server log", slot, err)
	} else if err != nil {
		return fmt.Errorf("shardkit: verify: %w", err)
	}
	return nil
}
