package rebalance

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

// cutoverPlan is one direction of a cutover: the shard's serving copy
// (from) hands over to the replicated copy (to). A move cuts over from
// source to target; a rollback from target back to source.
type cutoverPlan struct {
	from, to         *pgxpool.Pool
	fromName, toName string
	slot             string // the replication slot on from that feeds to
	// The journal steps of this direction.
	fenced, barrier, applied, sequences, flipped Step
	afterApplied                                 func(context.Context) error // optional, inside the applied step
	beforeFlip                                   func(context.Context) error // optional, inside the flipped step
}

// runCutover runs the fenced window: map fenced, write barrier on from
// with the final WAL position, wait until to has applied it, carry the
// sequences and wait for to's clock, flip the map. Steps already journalled
// are skipped. The caller aborts on an error before the flip.
func (mv *Mover) runCutover(ctx context.Context, mc *moveCtx, p cutoverPlan) error {
	m := mc.m
	fencedAt := time.Now()
	err := mv.step(ctx, mc, p.fenced, func(ctx context.Context) error {
		fencedAt = time.Now()
		return setMapState(ctx, mv.cfg.Catalog, m.Shard, p.fromName, router.StateFenced)
	})
	if err == nil {
		err = mv.step(ctx, mc, p.barrier, func(ctx context.Context) error {
			lsn, err := installBarrier(ctx, p.from, mc.schema)
			if err != nil {
				return err
			}
			m.FinalLSN = lsn
			return nil
		})
	}
	if err == nil {
		err = mv.step(ctx, mc, p.applied, func(ctx context.Context) error {
			if err := waitSlotReached(ctx, p.from, p.slot, m.FinalLSN, mv.cfg.CutoverTimeout); err != nil {
				return err
			}
			if p.afterApplied != nil {
				return p.afterApplied(ctx)
			}
			return nil
		})
	}
	if err == nil {
		err = mv.step(ctx, mc, p.sequences, func(ctx context.Context) error {
			v, err := carrySequences(ctx, p.from, p.to, mc.schema, mv.cfg.SequenceMargin)
			if err != nil {
				return err
			}
			m.SeqValue = v
			return waitClockPastNewestID(ctx, p.to, mc.schema, mc.layout)
		})
	}
	if err == nil {
		err = mv.step(ctx, mc, p.flipped, func(ctx context.Context) error {
			if p.beforeFlip != nil {
				if err := p.beforeFlip(ctx); err != nil {
					return err
				}
			}
			if err := flipMap(ctx, mv.cfg.Catalog, m.Shard, p.fromName, p.toName); err != nil {
				return err
			}
			m.FencedFor = time.Since(fencedAt)
			return nil
		})
	}
	return err
}
