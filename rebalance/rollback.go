package rebalance

import (
	"context"
	"fmt"

	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// Steps of a rollback. A move rolled back before its flip is undone in one
// idempotent step; after the flip, the shard is cut over back to its source
// the same way it left, through the reverse replication.
const (
	stepRbUndo      Step = "rb_undo"      // before the flip: everything on the target removed
	stepRbFenced    Step = "rb_fenced"    // shard (on the target) fenced
	stepRbBarrier   Step = "rb_barrier"   // target refuses writes; its final LSN captured
	stepRbApplied   Step = "rb_applied"   // source applied the target's final LSN
	stepRbSequences Step = "rb_sequences" // sequences carried back
	stepRbSealed    Step = "rb_sealed"    // target barrier sealed before its fence lease lapsed
	stepRbFlipped   Step = "rb_flipped"   // map points at the source again
	stepRbCleaned   Step = "rb_cleaned"   // replication and the target's copy removed
)

var rollbackSteps = []Step{stepReverse, stepRbFenced, stepRbBarrier, stepRbApplied, stepRbSequences, stepRbSealed, stepRbFlipped, stepRbCleaned}

// Rollback returns a shard to the source of its unfinished move. Before the
// cutover it removes what the move made; after it (a reversible move) it
// cuts the shard over back to the source through the reverse replication.
// A rollback that was interrupted is continued.
func (mv *Mover) Rollback(ctx context.Context, shard int) (_ Move, err error) {
	defer asMoveError(&err, shard)
	m, err := mv.j.open(ctx, shard)
	if err != nil {
		return Move{}, err
	}
	if i := stepIndex(onlineSteps, m.Step); m.State == StateRunning && !m.Offline &&
		i >= stepIndex(onlineSteps, stepFenced) && i < stepIndex(onlineSteps, stepFlipped) {
		// Stopped inside the fenced window: the barrier decides. Sealed,
		// the target has every write and the map flips (then the rollback
		// cuts back over); otherwise the fence is released, so that a
		// mover still running cannot seal it any more.
		mc, err := mv.prepare(ctx, &m)
		if err != nil {
			return m, err
		}
		if _, err := mv.settleFence(ctx, mc, mv.forwardPlan(mc), true, nil, ""); err != nil {
			return m, err
		}
	}
	if m.State == StateRunning && !m.Offline && stepIndex(onlineSteps, m.Step) >= stepIndex(onlineSteps, stepFlipped) {
		// Cut over but killed before reverse replication: finish that first.
		if m, err = mv.drive(ctx, &m); err != nil {
			return m, err
		}
	}
	if !m.Offline && m.Step == stepReverse {
		// Nothing of the cutover back has run yet: it needs the reverse
		// slot, which a failover of the target may have lost.
		if err := mv.reverseKept(ctx, &m); err != nil {
			return m, err
		}
	}
	if m.State != StateRollingBack {
		if err := mv.setState(ctx, &m, StateRollingBack); err != nil {
			return m, err
		}
	}
	return mv.rollback(ctx, &m)
}

// reverseKept checks, before a rollback's cutover fences anything, that
// the reverse slot is on the target's primary (the host the catalog
// records). A rollback found it gone leaves the move reversible (or puts
// it back, when an earlier attempt had begun rolling back), since it can
// still be completed.
func (mv *Mover) reverseKept(ctx context.Context, m *Move) error {
	mc, err := mv.prepare(ctx, m)
	if err != nil {
		return err
	}
	var exists bool
	if err := mc.tgt.QueryRow(ctx, sqlSlotExists, mc.n.rev).Scan(&exists); err != nil {
		return fmt.Errorf("look up slot %s: %w", mc.n.rev, err)
	}
	if exists {
		return nil
	}
	if m.State == StateRollingBack {
		if err := mv.setState(ctx, m, StateReversible); err != nil {
			return err
		}
	}
	mv.log.Warn("shardkit: move's reverse replication slot is gone from its target, as after a failover to a standby that did not sync it; the move can only be completed",
		"move", m.ID, "shard", m.Shard, "target", m.Target, "slot", mc.n.rev)
	return ofKind(ErrReverseLost, fmt.Errorf("shardkit: rollback of shard %d: replication slot %s is gone from the target %s's primary, as after a failover to a standby that did not sync it: "+
		"the move can no longer be rolled back; nothing changed, the shard is served by %s: Mover.Complete it, then move it back with a new move",
		m.Shard, mc.n.rev, m.Target, m.Target))
}

func (mv *Mover) rollback(ctx context.Context, m *Move) (Move, error) {
	mc, err := mv.prepare(ctx, m)
	if err != nil {
		return *m, err
	}
	if stepIndex(rollbackSteps, m.Step) >= 0 {
		mc.steps = rollbackSteps
		if err := mv.acrossFailover(ctx, mc); err != nil {
			return *m, err
		}
		err = mv.rollbackCutover(ctx, mc)
	} else {
		err = mv.record(ctx, m, stepRbUndo, "", func(ctx context.Context) error { return mv.undo(ctx, mc) })
	}
	if err != nil {
		return *m, err
	}
	if err := mv.setState(ctx, m, StateRolledBack); err != nil {
		return *m, err
	}
	mv.log.Info("shardkit: move rolled back", "move", m.ID, "shard", m.Shard, "server", m.Source)
	return *m, nil
}

// undo removes everything a move made before its flip. Each part is
// idempotent.
func (mv *Mover) undo(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	if err := removeBarrier(ctx, mc.src, mc.schema); err != nil {
		return err
	}
	if err := setHome(ctx, mc.src, mc.role, mc.schema, true); err != nil {
		return err
	}
	if err := setMapState(ctx, mv.j.s, m.Shard, m.Source, router.StateActive); err != nil {
		return err
	}
	return mv.dropReplication(ctx, mc, false)
}

// dropReplication removes both directions' subscriptions, slots and
// publications, then the shard's schema on the side that no longer serves
// it (the source when onSource).
func (mv *Mover) dropReplication(ctx context.Context, mc *moveCtx, onSource bool) error {
	if err := mc.dropForward(ctx); err != nil {
		return err
	}
	if err := dropSubscription(ctx, mc.src, mc.n.rev, mc.tgt); err != nil {
		return err
	}
	if err := dropSlot(ctx, mc.tgt, mc.n.rev); err != nil {
		return err
	}
	if err := dropPublication(ctx, mc.tgt, mc.n.rev, mc.schema); err != nil {
		return err
	}
	serving, err := mv.servingServer(ctx, mc)
	if err != nil {
		return err
	}
	side, drop := mc.m.Target, mc.tgt
	if onSource {
		side, drop = mc.m.Source, mc.src
	}
	if serving == side {
		return fmt.Errorf("shard %d is served by %s; refusing to drop its schema there", mc.m.Shard, side)
	}
	return shardschema.DropShard(ctx, drop, mc.m.Shard)
}

// rollbackCutover cuts a reversible move back over to its source.
func (mv *Mover) rollbackCutover(ctx context.Context, mc *moveCtx) error {
	if err := mv.runCutover(ctx, mc, mv.rollbackPlan(mc)); err != nil {
		return err
	}
	return mv.step(ctx, mc, stepRbCleaned, func(ctx context.Context) error { return mv.dropReplication(ctx, mc, false) })
}

// rollbackPlan is the cutover of a rollback: from the target back to the
// source.
func (mv *Mover) rollbackPlan(mc *moveCtx) cutoverPlan {
	m := mc.m
	return cutoverPlan{
		from: mc.tgt, to: mc.src, fromName: m.Target, toName: m.Source, slot: mc.n.rev,
		fenced: stepRbFenced, barrier: stepRbBarrier, applied: stepRbApplied, sequences: stepRbSequences,
		sealed: stepRbSealed, flipped: stepRbFlipped,
		// The source still carries the barrier of the forward cutover.
		removeOnTo: true,
		// Aborted, the shard stays on the target, reversible again.
		abortState: router.StateActive, abortStep: stepReverse, what: "rollback cutover",
		afterAbort: func(ctx context.Context) error { return mv.setState(ctx, m, StateReversible) },
	}
}

// Complete finishes a reversible move: reverse replication, slots,
// publications and the old copy on the source are dropped. The move can no
// longer be rolled back.
// Config.StepTimeout bounds it (ErrStopped past it).
func (mv *Mover) Complete(ctx context.Context, shard int) (m Move, err error) {
	defer asMoveError(&err, shard)
	err = mv.bounded(ctx, fmt.Sprintf("complete the move of shard %d", shard), func(ctx context.Context) error {
		m, err = mv.complete(ctx, shard)
		return err
	})
	return m, err
}

func (mv *Mover) complete(ctx context.Context, shard int) (Move, error) {
	m, err := mv.j.open(ctx, shard)
	if err != nil {
		return Move{}, err
	}
	if m.State != StateReversible {
		return m, fmt.Errorf("shardkit: move %d of shard %d is %s at step %s: %w (complete needs a cut-over move; resume it first)",
			m.ID, shard, m.State, m.Step, ErrWrongState)
	}
	mc, err := mv.prepare(ctx, &m)
	if err != nil {
		return m, err
	}
	if err := mv.record(ctx, &m, stepCleaned, "", func(ctx context.Context) error {
		return mv.dropReplication(ctx, mc, true)
	}); err != nil {
		return m, err
	}
	if err := mv.setState(ctx, &m, StateCompleted); err != nil {
		return m, err
	}
	mv.log.Info("shardkit: move completed", "move", m.ID, "shard", shard, "server", m.Target)
	return m, nil
}
