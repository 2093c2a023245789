package rebalance

import (
	"context"
	"fmt"
)

// acrossFailover readies a move that goes on (a resume, a rollback) for
// what a failover of either server may have changed since its mover last
// ran. Its pools reach each server's primary now (the host the catalog
// records, see Mover.server), and:
//
//   - the subscriptions are pointed at that host: a subscription names
//     the host its slot was made on, which after a failover is a standby
//     turned primary, or an old primary cut off;
//   - a running move whose forward slot is gone from the source (a
//     failover to a standby that did not sync it: PostgreSQL 15 and 16,
//     or 17+ without sync_replication_slots) copies again from scratch,
//     with the shard served by its source throughout. Stopped inside its
//     cutover, it first lets the barrier decide, as any resume there
//     does: sealed, the target has every write and the map flips, and no
//     slot is needed any more; otherwise the fence is released.
//
// A failover slot (PostgreSQL 17+) synced to the promoted standby is kept,
// and the move resumes where it stopped.
func (mv *Mover) acrossFailover(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	if m.Offline {
		return nil
	}
	if err := repointSubscription(ctx, mc.tgt, mc.n.fwd, mc.srcDSN, mc.srcAt); err != nil {
		return err
	}
	if err := repointSubscription(ctx, mc.src, mc.n.rev, mc.tgtDSN, mc.tgtAt); err != nil {
		return err
	}
	if m.State != StateRunning || !mc.done(stepCopiedSnapshot) || mc.done(stepFlipped) {
		return nil // no forward slot needed: not made yet, or the map flipped
	}
	var exists bool
	if err := mc.src.QueryRow(ctx, sqlSlotExists, mc.n.fwd).Scan(&exists); err != nil {
		return fmt.Errorf("look up slot %s: %w", mc.n.fwd, err)
	}
	if exists {
		return nil
	}
	if mc.done(stepFenced) {
		s, err := mv.settleFence(ctx, mc, mv.forwardPlan(mc), true, nil, "")
		if err != nil {
			return mv.stepFailed(ctx, m, stepFenced, err)
		}
		if s == settledFlipped {
			return nil
		}
	}
	mv.log.Warn("shardkit: move's replication slot is gone from its source, as after a failover to a standby that did not sync it; copying again",
		"move", m.ID, "shard", m.Shard, "source", m.Source, "slot", mc.n.fwd, "step", m.Step)
	return mv.recopy(ctx, mc)
}

// recopy takes a running move that is not fenced back to the start of
// its copy: the forward subscription and the reverse slot and
// publication go (the target's schema is made anew, and a publication
// of the schema would lose it), and the journal records the map's
// moving state as the last step, so that the target's schema, the copy
// and everything after it run again. The shard stays on its source,
// which serves it.
func (mv *Mover) recopy(ctx context.Context, mc *moveCtx) error {
	if err := dropSubscription(ctx, mc.tgt, mc.n.fwd, mc.src); err != nil {
		return err
	}
	if err := dropSlot(ctx, mc.tgt, mc.n.rev); err != nil {
		return err
	}
	if err := dropPublication(ctx, mc.tgt, mc.n.rev, mc.schema); err != nil {
		return err
	}
	if err := mv.j.endStep(ctx, mc.m.ID, stepMapMoving); err != nil {
		return err
	}
	mc.m.Step, mc.m.Doing, mc.m.Error = stepMapMoving, "", ""
	return nil
}
