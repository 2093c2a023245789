package rebalance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// online runs an online move forward up to the reversible state.
func (mv *Mover) online(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	steps := []struct {
		s  Step
		fn func(context.Context) error
	}{
		{stepMapMoving, func(ctx context.Context) error {
			return setMapState(ctx, mv.j.s, m.Shard, m.Source, router.StateMoving)
		}},
		{stepTargetSchema, func(ctx context.Context) error { return mv.createTarget(ctx, mc) }},
		{stepPublication, func(ctx context.Context) error { return createPublication(ctx, mc.src, mc.n.fwd, mc.schema) }},
		// The rows, as of the snapshot exported by the forward slot, into
		// tables without keys or indexes; a rerun drops whatever an earlier
		// attempt left (its slot's snapshot is gone) and copies again.
		{stepCopiedSnapshot, func(ctx context.Context) error {
			if err := dropSubscription(ctx, mc.tgt, mc.n.fwd, mc.src); err != nil {
				return err
			}
			res, err := mv.copyRows(ctx, mc, mc.n.fwd)
			if err != nil {
				return err
			}
			mv.log.Info("shardkit: move copied its rows", "move", m.ID, "shard", m.Shard, "tables", res.tables,
				"rows", res.rows, "bytes", res.bytes, "slot", mc.n.fwd, "consistent_point", res.slotLSN,
				"slot_took", res.slotTook.Round(time.Microsecond))
			return nil
		}},
		{stepIndexes, func(ctx context.Context) error { return mv.buildIndexes(ctx, mc) }},
		// The subscription streams from the slot's consistent point, which
		// is where the copy's snapshot stands. It comes after the index
		// build: applying an update or a delete needs the primary key.
		{stepSubscribed, func(ctx context.Context) error {
			return createSubscription(ctx, mc.tgt, mc.n.fwd, mc.srcDSN, mc.srcAt, mc.n.fwd)
		}},
		{stepCaughtUp, func(ctx context.Context) error { return mv.waitCaughtUp(ctx, mc) }},
		// Reverse replication's slot is made now, outside the fenced window
		// (making a slot waits for running transactions). It will see the
		// forward changes the target still applies; reverse replication
		// skips them by starting at the target LSN captured once the target
		// applied the source's final LSN (stepApplied).
		{stepReverseSlot, func(ctx context.Context) error {
			if err := createPublication(ctx, mc.tgt, mc.n.rev, mc.schema); err != nil {
				return err
			}
			return createSlot(ctx, mc.tgt, mc.n.rev)
		}},
	}
	for _, st := range steps {
		fn := st.fn
		if st.s == stepCopiedSnapshot || st.s == stepIndexes {
			fn = func(ctx context.Context) error {
				release, err := mv.phases.heavyStep(ctx)
				if err != nil {
					return err
				}
				defer release()
				return st.fn(ctx)
			}
		}
		if err := mv.step(ctx, mc, st.s, fn); err != nil {
			return err
		}
	}
	if err := mv.cutover(ctx, mc); err != nil {
		return err
	}
	if err := mv.step(ctx, mc, stepReverse, func(ctx context.Context) error { return mv.reverse(ctx, mc) }); err != nil {
		return err
	}
	if m.State == StateRunning {
		if err := mv.setState(ctx, m, StateReversible); err != nil {
			return err
		}
	}
	mv.log.Info("shardkit: move cut over; reverse replication kept for rollback", "move", m.ID, "shard", m.Shard,
		"fenced", m.FencedFor)
	return nil
}

// createTarget creates the shard's schema on the target, without the
// keys, indexes and triggers that the copy builds after the rows (see
// stripTarget). A schema left by an interrupted attempt is dropped first;
// the shard map never places the shard on the target before the flip, so
// nothing there is live.
func (mv *Mover) createTarget(ctx context.Context, mc *moveCtx) error {
	snap, err := mv.cfg.Catalog.Operator().Load(ctx)
	if err != nil {
		return err
	}
	if p, err := snap.Placement(mc.m.Shard); err != nil || p.Server == mc.m.Target {
		return fmt.Errorf("shard %d is placed on the target %s already; refusing to recreate its schema there", mc.m.Shard, mc.m.Target)
	}
	if ok, err := schemaExists(ctx, mc.tgt, mc.schema); err != nil {
		return err
	} else if ok {
		if err := shardschema.DropShard(ctx, mc.tgt, mc.m.Shard); err != nil {
			return err
		}
	}
	// Every table is fenced in the transaction that creates it (see
	// sqlTargetFenceFunc): a router whose map is older than this move may
	// still place the shard here, from an earlier move.
	fence := func(ctx context.Context, tx pgx.Tx) error { return fenceTarget(ctx, tx, mc.schema) }
	if err := shardschema.ApplyShard(ctx, mc.tgt, mc.layout, mc.m.Shard, mv.cfg.ShardSQL,
		shardschema.ApplyOptions{DeferIndexes: true, Then: fence}); err != nil {
		return err
	}
	// Then what the schema holds beyond its per-shard SQL (the preflight
	// checked it can be carried): tables before the publication includes
	// them, keys, indexes and triggers after the copy (buildIndexes).
	if err := carry(ctx, nil, mc.src, mc.tgt, mc.schema, mc.role, false, fence); err != nil {
		return err
	}
	return stripTarget(ctx, mc.tgt, mc.schema)
}

// cutover fences the shard, stops writes on the source, waits for the
// target to apply everything, carries the sequences, seals the barrier and
// flips the map. Any failure before the seal aborts: barrier released,
// shard unfenced, and the journal back at caught_up, so a resume tries
// again.
func (mv *Mover) cutover(ctx context.Context, mc *moveCtx) error {
	return mv.runCutover(ctx, mc, mv.forwardPlan(mc))
}

// forwardPlan is the cutover of a move: from the source to the target.
func (mv *Mover) forwardPlan(mc *moveCtx) cutoverPlan {
	m := mc.m
	return cutoverPlan{
		from: mc.src, to: mc.tgt, fromName: m.Source, toName: m.Target, slot: mc.n.fwd,
		fenced: stepFenced, barrier: stepBarrier, applied: stepApplied, sequences: stepSequences,
		sealed: stepSealed, flipped: stepFlipped,
		captureTargetLSN: true,
		// The target's barrier (fenceTarget) goes just before the flip.
		removeOnTo: true,
		// The reverse slot stays: the next cutover captures a new target LSN.
		abortState: router.StateMoving, abortStep: stepCaughtUp, what: "cutover",
	}
}

// reverse starts reverse replication after the flip, so that the old copy
// stays current for a rollback: the forward subscription and publication
// go first (both directions at once would loop), then the reverse slot
// skips to where the target stood once it applied the source's final LSN.
func (mv *Mover) reverse(ctx context.Context, mc *moveCtx) error {
	m := mc.m
	if m.TargetLSN == "" {
		// Stopped between the flip and recording where reverse
		// replication starts: read it while the subscription is there.
		lsn, err := originLSN(ctx, mc.tgt, mc.n.fwd)
		if err != nil {
			return err
		}
		if err := mv.j.recordCutover(ctx, m.ID, m.FencedFor, m.Cutover, lsn); err != nil {
			return err
		}
		m.TargetLSN = lsn
	}
	// The forward subscription goes first: both at once would loop.
	if err := mc.dropForward(ctx); err != nil {
		return err
	}
	if err := advanceSlot(ctx, mc.tgt, mc.n.rev, m.TargetLSN); err != nil {
		return err
	}
	return createSubscription(ctx, mc.src, mc.n.rev, mc.tgtDSN, mc.tgtAt, mc.n.rev)
}
