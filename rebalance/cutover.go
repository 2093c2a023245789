package rebalance

import (
	"context"
	"errors"
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

	afterApplied func(context.Context) error // optional, inside the applied step
	beforeFlip   func(context.Context) error // optional, inside the flipped step

	// On an abort the shard goes back to abortState on from, and the
	// journal back to abortStep; afterAbort (optional) runs last.
	abortState router.ShardState
	abortStep  Step
	what       string // "cutover" or "rollback cutover", for logs and the journal
	afterAbort func(context.Context) error
}

// runCutover runs the fenced window: map fenced, write barrier on from
// with the final WAL position, wait until to has applied it, carry the
// sequences and wait for to's clock, flip the map. Steps already journalled
// are skipped. Any failure before the flip aborts, a cancelled ctx included
// (Ctrl-C must not leave the shard fenced); only a killed process leaves
// the fence up, for Resume or Rollback to finish.
func (mv *Mover) runCutover(ctx context.Context, mc *moveCtx, p cutoverPlan) error {
	err := mv.fencedWindow(ctx, mc, p)
	if err == nil || mc.done(p.flipped) {
		return err
	}
	if abortErr := mv.abortCutover(ctx, mc, p, err); abortErr != nil {
		return errors.Join(err, abortErr)
	}
	return err
}

// abortCutover undoes a cutover that did not reach the flip: barrier
// removed from the serving copy, map unfenced, journal back a step.
func (mv *Mover) abortCutover(ctx context.Context, mc *moveCtx, p cutoverPlan, cause error) error {
	m := mc.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	mv.log.Warn("shardkit: aborting "+p.what, "move", m.ID, "shard", m.Shard, "cause", cause)
	if err := removeBarrier(ctx, p.from, mc.schema); err != nil {
		return err
	}
	if err := setMapState(ctx, mv.cfg.Catalog, m.Shard, p.fromName, p.abortState); err != nil {
		return err
	}
	if err := mv.j.exec(ctx, sqlEndStep, m.ID, string(p.abortStep)); err != nil {
		return err
	}
	m.Step, m.Doing = p.abortStep, ""
	if p.afterAbort != nil {
		if err := p.afterAbort(ctx); err != nil {
			return err
		}
	}
	return mv.j.exec(ctx, sqlFailStep, m.ID, p.what+" aborted: "+cause.Error())
}

// fencedWindow runs the journalled steps of the cutover.
func (mv *Mover) fencedWindow(ctx context.Context, mc *moveCtx, p cutoverPlan) error {
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
