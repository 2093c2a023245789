package rebalance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// removeOnTo drops the write barrier that to still carries from an
	// earlier cutover, just before the flip.
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
// for the lag gate, and runs the fenced
// steps with one round trip each: fence (catalog, journal included) and,
// at the same time, barrier (serving side: locks, refusing trigger body,
// final LSN, sequences, newest ID),
// the sequences' carry to the replica if the carry before the fence did
// not cover them (with a reading of its clock), a clock wait only when the
// newest ID is ahead of that clock, the barrier's commit and the wait for
// the replica to confirm the final LSN (one message to the serving side,
// which waits itself), the seal (serving side: locks, a check that the
// lease holds, a barrier that refuses for good) and the flip (catalog,
// journal included). The steps between the fence and the
// flip are not journalled on their own. A mover resumed inside the window
// does not go on with them: the barrier decides (settleFence). Sealed, the
// map flips; otherwise the attempt is released and a new one starts. The
// breakdown is recorded after the flip.
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
	var ct CutoverTimes
	token := newFenceToken()
	pctx, cancel := context.WithTimeout(ctx, mv.cfg.GateTimeout)
	bs, err := barrierSQL(pctx, p.from, mc.schema, mv.cfg.BarrierWait, token, mv.cfg.FenceLease)
	cancel()
	if err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	seal := sealSQL(mc.schema, token, bs.tables, 5*time.Second)
	var removeSQL string
	if p.removeOnTo {
		removeSQL = removeBarrierSQL(mc.schema, bs.tables)
	}
	if !mc.done(p.fenced) && m.Doing != p.fenced {
		if err := mv.j.beginStep(ctx, m.ID, p.fenced); err != nil {
			return err
		}
		m.Doing = p.fenced
	}

	t := time.Now()
	release, err := mv.phases.cutover(ctx)
	if err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	defer release()
	ct.Queue = time.Since(t)
	// The window's connections, held from before the gate to the end: no
	// pool wait or new connection inside the window.
	cat, err := mv.cfg.Catalog.Window(ctx)
	if err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	defer cat.Release()
	var from, to *pgxpool.Conn
	var seqNames []string
	var seqVals []int64
	for _, c := range []struct {
		dst  **pgxpool.Conn
		pool *pgxpool.Pool
		what string
	}{{&from, p.from, p.fromName}, {&to, p.to, p.toName}} {
		if *c.dst, err = c.pool.Acquire(ctx); err != nil {
			return mv.stepFailed(ctx, m, p.fenced, fmt.Errorf("connect to %s: %w", c.what, err))
		}
		defer (*c.dst).Release()
		names, vals, err := warmWindowConn(ctx, *c.dst, bs)
		if err != nil {
			return mv.stepFailed(ctx, m, p.fenced, fmt.Errorf("%s: %w", c.what, err))
		}
		if *c.dst == from {
			seqNames, seqVals = names, vals
		}
	}
	// The sequences go to the replica before the fence, with twice the
	// margin: unless the shard drew more than the margin from a sequence
	// before the barrier, the window then carries nothing (its carry was a
	// round trip to the replica, which under load took up to ~60 ms).
	// Failing here costs nothing: the window carries them as before.
	t = time.Now()
	pre, err := carryClock(ctx, to, mc.schema, seqNames, seqVals, 2*mv.cfg.SequenceMargin)
	if err != nil {
		mv.log.Warn("shardkit: carrying the sequences before the fence failed; the fenced window will", "move", m.ID, "shard", m.Shard, "err", err)
		pre = carriedClock{}
	}
	ct.Precarry = time.Since(t)
	// Fence and barrier, attempted until the barrier gets its locks
	// within BarrierWait: a write transaction still running on the shard
	// would otherwise hold the barrier, and every write queued behind it,
	// for as long as it runs. A failed attempt unfences at once (writes
	// paused for about BarrierWait) and goes back to the lag gate. Past
	// GateTimeout, one last attempt waits up to 5s.
	var fencedAt time.Time
	var bar barrierResult
	deadline := time.Now().Add(mv.cfg.GateTimeout)
	for !mc.done(p.barrier) {
		if !mc.done(p.fenced) {
			t = time.Now()
			if err := mv.lagGate(ctx, mc, cat, from, p.slot); err != nil {
				return mv.stepFailed(ctx, m, p.fenced, err)
			}
			ct.Gate += time.Since(t)
		}
		ct.Attempts++
		wait, last := mv.cfg.BarrierWait, time.Now().After(deadline)
		if last {
			wait = 5 * time.Second
		}
		if mv.cfg.hook != nil {
			if !mc.done(p.fenced) {
				mv.cfg.hook(*m, p.fenced, false)
			}
			mv.cfg.hook(*m, p.barrier, false)
		}
		// The fence (catalog) and the barrier (serving side) go at once,
		// each on its own connection, so the window pays the longer of the
		// two, not both; the barrier's transaction commits only once the
		// fence has, so a write the barrier refuses finds the shard fenced
		// when it reloads the map, as before. A fence that fails rolls the
		// barrier back; a mover killed before the commit leaves nothing
		// installed (Postgres rolls back a closed session). m is the
		// fence's alone until it is done.
		fencedAt = time.Now()
		var fenceEnd time.Time
		fenced := make(chan error, 1)
		if mc.done(p.fenced) {
			fenceEnd = fencedAt
			fenced <- nil
		} else {
			go func() {
				sctx, cancel := context.WithTimeout(ctx, mv.cfg.CutoverTimeout+5*time.Second)
				defer cancel()
				err := fenceJournalled(sctx, cat, m, p.fromName, router.StateFenced, mv.cfg.FenceLease, p.fenced, p.barrier)
				fenceEnd = time.Now()
				ct.Fence = fenceEnd.Sub(fencedAt)
				if err != nil && ctx.Err() == nil && sctx.Err() != nil {
					err = &TimeoutError{What: "cutover step " + string(p.fenced), After: mv.cfg.CutoverTimeout + 5*time.Second, Err: err}
				}
				if err == nil {
					m.Step, m.Doing, m.Error = p.fenced, mc.next(p.fenced), ""
					if mv.cfg.hook != nil {
						mv.cfg.hook(*m, p.fenced, true)
					}
				}
				fenced <- err
			}()
		}
		bar, err = openBarrier(ctx, from, mc.schema, bs.sql, wait)
		if ferr := <-fenced; ferr != nil {
			if err == nil {
				rollbackBarrier(ctx, from)
			}
			return mv.stepFailed(ctx, m, p.fenced, ferr)
		}
		mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", p.fenced, "took", ct.Fence.Round(time.Microsecond))
		barEnd := time.Now()
		ct.Barrier = max(barEnd.Sub(fenceEnd), 0)
		var pe *pgconn.PgError
		if err != nil && !last && errors.As(err, &pe) && pe.Code == "55P03" {
			// Back to where the fence found the shard, in one statement.
			prev := mc.steps[stepIndex(mc.steps, p.fenced)-1]
			if err := fenceJournalled(ctx, cat, m, p.fromName, p.abortState, 0, prev, p.fenced); err != nil {
				return mv.stepFailed(ctx, m, p.fenced, err)
			}
			m.Step, m.Doing = prev, p.fenced
			ct.Aborted = max(ct.Aborted, time.Since(fencedAt))
			mv.log.Info("shardkit: barrier waited too long for a running write; unfenced, trying again",
				"move", m.ID, "shard", m.Shard, "attempt", ct.Attempts, "paused", time.Since(fencedAt).Round(time.Microsecond))
			continue
		}
		if err != nil {
			return mv.stepFailed(ctx, m, p.barrier, err)
		}
		m.FinalLSN = bar.lsn
		break
	}
	// The barrier's transaction is open (its locks hold every write) until
	// the commit at the head of the seal's round trip below; anything that
	// fails before that ends it, so that the abort finds the tables free.
	barrierOpen := !mc.done(p.barrier)
	defer func() {
		if barrierOpen {
			rollbackBarrier(ctx, from)
		}
	}()
	// The sequences go to the replica while it applies the final LSN,
	// unless the carry before the fence covered them.
	type carryResult struct {
		c   carriedClock
		err error
	}
	var carry chan carryResult
	if err == nil && bar.lsn != "" && pre.covers(bar, mv.cfg.SequenceMargin) {
		carry = make(chan carryResult, 1)
		carry <- carryResult{c: pre}
	} else if err == nil && bar.lsn != "" {
		ct.CarriedInWindow = true
		carry = make(chan carryResult, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, mv.cfg.CutoverTimeout)
			defer cancel()
			c, err := carryClock(cctx, to, mc.schema, bar.names, bar.vals, mv.cfg.SequenceMargin)
			carry <- carryResult{c, err}
		}()
		defer func() {
			if carry != nil {
				<-carry // the connection goes back to the pool only once done
			}
		}()
	}
	// The sequences and the clock first: they must be on to before the
	// seal (a sealed barrier flips the map, carried or not). Carried
	// before the fence, as they mostly are, this takes no round trip.
	if err == nil {
		err = mv.windowStep(ctx, mc, p.sequences, false, &ct.Carry, func(ctx context.Context) error {
			r := <-carry
			carry = nil
			if r.err != nil {
				return r.err
			}
			m.SeqValue = r.c.top
			t := time.Now()
			err := r.c.clockPast(ctx, mc.layout.UnixMsOf(bar.newestID))
			ct.Clock = time.Since(t)
			return err
		})
		ct.Carry -= ct.Clock
	}
	// Then one round trip to the serving side for the barrier's commit and
	// the wait for to to confirm the final LSN (two round trips or more
	// before, each a chance to wait for a CPU on a busy server).
	if err == nil && !mc.done(p.applied) {
		err = mv.commitAndApply(ctx, mc, p, from, &ct)
		barrierOpen = false
	}
	// The seal: only a barrier sealed while its lease held lets the map
	// flip. It comes before the barrier on to is removed, so that a lapsed
	// lease leaves to as it was.
	if err == nil {
		err = mv.windowStep(ctx, mc, p.sealed, false, &ct.Seal, func(ctx context.Context) error {
			return runSeal(ctx, from, mc.schema, seal)
		})
	}
	if err == nil {
		err = mv.windowStep(ctx, mc, p.flipped, true, &ct.Flip, func(ctx context.Context) error {
			if removeSQL != "" {
				if _, err := to.Exec(ctx, removeSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
					return fmt.Errorf("remove write barrier on %s: %w", mc.schema, err)
				}
			}
			return flipJournalled(ctx, cat, m, p.fromName, p.toName, p.flipped, mc.next(p.flipped))
		})
		if err == nil {
			m.FencedFor = time.Since(fencedAt)
		}
	}
	if err != nil || !mc.done(p.flipped) {
		return err
	}
	m.Cutover = ct
	if p.captureTargetLSN {
		if m.TargetLSN, err = originLSN(ctx, p.to, p.slot); err != nil {
			return err
		}
	}
	mv.log.Info("shardkit: "+p.what+" fenced window", "move", m.ID, "shard", m.Shard,
		"fenced", m.FencedFor.Round(time.Microsecond), "steps", ct.String())
	return mv.j.recordCutover(ctx, m.ID, m.FencedFor, ct, m.TargetLSN)
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
		err = &TimeoutError{What: "cutover step " + string(s), After: mv.cfg.CutoverTimeout + 5*time.Second, Err: err}
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

// commitAndApply commits the barrier and waits, on the serving side,
// until to's subscription (p.slot) confirmed the final LSN: one
// simple-protocol message, so the window pays one round trip for the
// commit and the wait instead of one for the commit and one or more for
// the wait. The commit is the barrier's transaction (committed
// synchronously, which flushes the WAL up to the final LSN for the
// walsender); the wait runs after it, so a wait that times out leaves the
// barrier installed and unsealed, as before. The server stamps its clock
// around the wait: the breakdown reads the wait from those stamps and
// counts the rest of the round trip (travel, and the commit) in the
// barrier's step. The seal stays a round trip of its own: between the
// two, the barrier is installed under a lease that may lapse, which the
// seal must find.
func (mv *Mover) commitAndApply(ctx context.Context, mc *moveCtx, p cutoverPlan, from *pgxpool.Conn, ct *CutoverTimes) error {
	m := mc.m
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, p.applied, false)
	}
	wait, err := slotWaitSQL(p.slot, m.FinalLSN, mv.cfg.CutoverTimeout)
	if err != nil {
		rollbackBarrier(ctx, from)
		return mv.stepFailed(ctx, m, p.applied, err)
	}
	sctx, cancel := context.WithTimeout(ctx, mv.cfg.CutoverTimeout+5*time.Second)
	defer cancel()
	const stamp = "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint"
	start := time.Now()
	results, err := from.Conn().PgConn().Exec(sctx, strings.Join([]string{"COMMIT", stamp, wait, stamp}, ";\n")).ReadAll()
	rtt := time.Since(start)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = &TimeoutError{What: "cutover steps " + string(p.barrier) + " and " + string(p.applied), After: mv.cfg.CutoverTimeout + 5*time.Second, Err: err}
	}
	if tx := from.Conn().PgConn().TxStatus(); tx == 'T' || tx == 'E' {
		rollbackBarrier(ctx, from) // the commit never ran: the barrier goes
	}
	committed := len(results) > 0 && results[0].CommandTag.String() == "COMMIT"
	if err == nil && !committed {
		err = fmt.Errorf("install write barrier on %s: the transaction was rolled back before its commit", mc.schema)
	}
	if err != nil {
		var pe *pgconn.PgError
		switch {
		case !committed && len(results) == 0:
			return mv.stepFailed(ctx, m, p.barrier, fmt.Errorf("install write barrier on %s: commit: %w", mc.schema, err))
		case !committed:
			return mv.stepFailed(ctx, m, p.barrier, err)
		case errors.As(err, &pe) && pe.Code == slotWaitSQLState:
			return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("%w (%s)", ErrCutoverTimeout, pe.Message))
		default:
			return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("wait for slot %s to confirm %s: %w", p.slot, m.FinalLSN, err))
		}
	}
	stampAt := func(i int) (int64, bool) {
		if i >= len(results) || len(results[i].Rows) != 1 || len(results[i].Rows[0]) != 1 {
			return 0, false
		}
		v, err := strconv.ParseInt(string(results[i].Rows[0][0]), 10, 64)
		return v, err == nil
	}
	t1, ok1 := stampAt(1)
	t2, ok2 := stampAt(3)
	if !ok1 || !ok2 || len(results) != 4 {
		return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("wait for slot %s to confirm %s: unexpected reply (%d results)", p.slot, m.FinalLSN, len(results)))
	}
	ct.Apply = time.Duration(t2-t1) * time.Microsecond
	ct.Barrier += max(rtt-ct.Apply, 0)
	for _, st := range []struct {
		s    Step
		took time.Duration
	}{{p.barrier, ct.Barrier}, {p.applied, ct.Apply}} {
		mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", st.s, "took", st.took.Round(time.Microsecond))
		if mv.cfg.hook != nil {
			mv.cfg.hook(*m, st.s, true)
		}
	}
	return nil
}
