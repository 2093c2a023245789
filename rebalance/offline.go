package rebalance

import (
	"context"
	"time"

	"github.com/shardkit/shardkit/router"
)

const sqlColumns = `SELECT a.attname FROM pg_attribute a
	WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
	ORDER BY a.attnum`

// offline moves a shard without logical replication: fence it, refuse
// writes on the source, COPY each table (copyRows, into tables without
// keys, indexes or triggers yet, so nothing is checked or fired on the
// copied rows), build the keys and indexes, verify, carry sequences, flip.
// The shard takes no writes for the whole copy; the fenced time is
// recorded. An offline move is completed at once (nothing to roll back to).
func (mv *Mover) offline(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	fencedAt := time.Now()
	steps := []struct {
		s  Step
		fn func(context.Context) error
	}{
		{stepMapMoving, func(ctx context.Context) error {
			return setMapState(ctx, mv.j.s, m.Shard, m.Source, router.StateMoving)
		}},
		{stepTargetSchema, func(ctx context.Context) error { return mv.createTarget(ctx, mc) }},
		{stepFenced, func(ctx context.Context) error {
			fencedAt = time.Now()
			return setMapState(ctx, mv.j.s, m.Shard, m.Source, router.StateFenced)
		}},
		{stepBarrier, func(ctx context.Context) error {
			lsn, err := installBarrier(ctx, mc.src, mc.schema)
			if err != nil {
				return err
			}
			m.FinalLSN = lsn
			return nil
		}},
		{stepCopiedOff, func(ctx context.Context) error {
			_, err := mv.copyRows(ctx, mc, "")
			return err
		}},
		{stepIndexes, func(ctx context.Context) error { return mv.buildIndexes(ctx, mc) }},
		{stepVerified, func(ctx context.Context) error {
			_, err := compareSchemas(ctx, mc.src, mc.tgt, mc.schema)
			return err
		}},
		{stepSequences, func(ctx context.Context) error {
			v, err := carrySequences(ctx, mc.src, mc.tgt, mc.schema, mv.cfg.SequenceMargin)
			if err != nil {
				return err
			}
			m.SeqValue = v
			return waitClockPastNewestID(ctx, mc.tgt, mc.schema, mc.layout)
		}},
		{stepFlipped, func(ctx context.Context) error {
			// The target's barrier (fenceTarget) goes first; the shard is
			// fenced, so no router with the current map writes on either
			// side before the flip.
			if err := removeBarrier(ctx, mc.tgt, mc.schema); err != nil {
				return err
			}
			// The application role follows the home: off the source (its
			// barrier refuses writes since the copy began, so nothing
			// changes there), onto the target, then the flip.
			if err := setHome(ctx, mc.src, mc.role, mc.schema, false); err != nil {
				return err
			}
			if err := setHome(ctx, mc.tgt, mc.role, mc.schema, true); err != nil {
				return err
			}
			if err := flipMap(ctx, mv.j.s, m.Shard, m.Source, m.Target); err != nil {
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
	if err := mv.record(ctx, m, stepCleaned, "", func(ctx context.Context) error {
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
