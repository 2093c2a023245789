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
	fenced, barrier, applied, sequences, sealed, flipped Step

	// captureTargetLSN records, after the flip, to's WAL position at the end
	// of the last change its subscription (named slot) applied, as
	// Move.TargetLSN: where reverse replication starts.
	captureTargetLSN bool
	// removeOnTo drops the write barrier that to carries, just before the
	// flip: a move's target's from its creation (fenceTarget), a
	// rollback's from the move's cutover.
	removeOnTo bool

	// On an abort the shard goes back to abortState on from, and the
	// journal back to abortStep; afterAbort (optional) runs last.
	abortState router.ShardState
	abortStep  Step
	what       string // "cutover" or "rollback cutover", for logs and the journal
	afterAbort func(context.Context) error
}

// runCutover runs the fenced window: map fenced, write barrier on from
// with the final WAL position and a fence lease, wait until to has applied
// it, carry the sequences and wait for to's clock, seal the barrier while
// the lease holds, flip the map. Steps already journalled are skipped. Any
// failure before the seal aborts, a cancelled ctx included (Ctrl-C must
// not leave the shard fenced); a killed process leaves the fence up until
// its lease lapses (Mover.WatchFences then ends it) or a resume ends it.
func (mv *Mover) runCutover(ctx context.Context, mc *moveCtx, p cutoverPlan) error {
	if !mc.done(p.fenced) {
		if err := waitPrepared(ctx, p.from, p.fromName, mc.schema); err != nil {
			return err // before the fence: nothing to undo (prepared.go)
		}
	}
	err := mv.fencedWindow(ctx, mc, p)
	if err == nil || mc.done(p.flipped) {
		return err
	}
	if abortErr := mv.abortCutover(ctx, mc, p, err); abortErr != nil {
		return errors.Join(err, abortErr)
	}
	if mc.done(p.flipped) {
		return nil // sealed before the failure: the abort flipped the map
	}
	return err
}

// abortCutover undoes a cutover that did not reach the flip: barrier
// released on the serving copy, map unfenced, journal back a step. A
// barrier found sealed is not undone: the map flips instead.
func (mv *Mover) abortCutover(ctx context.Context, mc *moveCtx, p cutoverPlan, cause error) error {
	m := mc.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	mv.log.Warn("shardkit: aborting "+p.what, "move", m.ID, "shard", m.Shard, "cause", cause)
	s, err := mv.settleFence(ctx, mc, p, true, nil, "")
	if err != nil || s == settledFlipped {
		return err
	}
	return mv.j.failStep(ctx, m.ID, p.what+" aborted: "+cause.Error())
}

// fencedWindow runs the cutover's steps. Everything it can prepare is
// prepared before the fence (statements built and prepared, tables and
// sequences listed, pass-through triggers installed, connections held and
// warmed); then it waits its turn (one cutover at a time per Mover, and
// none while another of its moves copies or builds indexes: phaseGate) and
// for the lag gate, and runs the fenced steps with one round trip each, in
// the order of window's methods below. The steps between the fence and
// the flip are not journalled on their own. A mover resumed inside the
// window does not go on with them: the barrier decides (settleFence).
// Sealed, the map flips; otherwise the attempt is released and a new one
// starts. The breakdown is recorded after the flip.
func (mv *Mover) fencedWindow(ctx context.Context, mc *moveCtx, p cutoverPlan) error {
	m := mc.m
	if mc.done(p.flipped) {
		return nil
	}
	if mc.done(p.fenced) {
		mv.log.Warn("shardkit: resuming inside the fenced window; the barrier decides", "move", m.ID, "shard", m.Shard, "step", m.Step)
		s, err := mv.settleFence(ctx, mc, p, true, nil, "")
		if err != nil {
			return mv.stepFailed(ctx, m, p.fenced, err)
		}
		if s == settledFlipped {
			return nil
		}
	}
	w := &window{mv: mv, mc: mc, m: m, p: p}
	defer w.close(ctx)
	if err := w.prepare(ctx); err != nil {
		return err
	}
	if err := w.hold(ctx); err != nil {
		return err
	}
	w.precarry(ctx)
	if err := w.fenceAndBarrier(ctx); err != nil {
		return err
	}
	w.startCarry(ctx)
	err := w.carry(ctx)
	if err == nil && !mc.done(p.applied) {
		err = w.apply(ctx)
		w.barrierOpen = false
	}
	if err == nil {
		err = w.seal(ctx)
	}
	if err == nil {
		err = w.flip(ctx)
	}
	if err != nil || !mc.done(p.flipped) {
		return err
	}
	return w.record(ctx)
}

// windowStep runs fn as step s of the fenced window unless the journal
// says it finished, and stores its duration in d. Only the fence and the
// flip are journalled (by fn, in the same statement as the map change);
// the other steps leave Move.Step where it is. The hook sees every step.
func (mv *Mover) windowStep(ctx context.Context, mc *moveCtx, s Step, journalled bool, d *time.Duration, fn func(ctx context.Context) error) error {
	if mc.done(s) {
		return nil
	}
	m := mc.m
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, s, false)
	}
	start := time.Now()
	// Every wait inside has its own bound (CutoverTimeout for the final
	// LSN); this one catches a statement stuck on a lock.
	sctx, cancel := context.WithTimeout(ctx, mv.cfg.CutoverTimeout+5*time.Second)
	err := fn(sctx)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = &timeoutError{What: "cutover step " + string(s), After: mv.cfg.CutoverTimeout + 5*time.Second, Err: err}
	}
	cancel()
	if err != nil {
		return mv.stepFailed(ctx, m, s, err)
	}
	*d = time.Since(start)
	if journalled {
		m.Step, m.Doing, m.Error = s, mc.next(s), ""
	}
	mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", s, "took", d.Round(time.Microsecond))
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, s, true)
	}
	return nil
}
