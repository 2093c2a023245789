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

	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/router"
)

// window is one run of a cutover's fenced window: what it prepared, the
// connections it holds, and the times of its steps.
type window struct {
	mv *Mover
	mc *moveCtx
	m  *Move
	p  cutoverPlan
	ct CutoverTimes

	bs        barrierStmt // the barrier, built before the window
	sealSQL   string      // the seal of this attempt's token
	removeSQL string      // the barrier on to, if p.removeOnTo
	grantSQL  string      // the application role's privileges on to ("" without the role)

	cat      *catalogmove.Window // held from before the gate to the end: no pool wait inside
	from, to *pgxpool.Conn
	releases []func() // of what hold acquired, run in reverse by close
	nu       *nudger  // wakes both sides' walsenders while the window waits on them

	seqNames []string // from's sequences, as warming its connection read them
	seqVals  []int64
	pre      carriedClock // the carry before the fence

	fencedAt, fenceEnd time.Time
	bar                barrierResult
	barrierOpen        bool             // the barrier's transaction is open on from
	carried            chan carryResult // the carry the window uses, once the barrier is in
	carryRunning       bool             // carried is filled by a goroutine that uses to
}

type carryResult struct {
	c   carriedClock
	err error
}

// close ends what the window still holds, in the reverse order of taking
// it: the carry in flight (to goes back to the pool only once it is
// done), a barrier transaction left open (so that the abort finds the
// tables free), the connections, the cutover's turn.
func (w *window) close(ctx context.Context) {
	if w.carryRunning && w.carried != nil {
		<-w.carried
	}
	if w.barrierOpen {
		rollbackBarrier(ctx, w.from)
	}
	for i := len(w.releases) - 1; i >= 0; i-- {
		w.releases[i]()
	}
}

// prepare builds the barrier and the seal for a fresh fence token and
// marks the fence under way in the journal. It keeps: nothing is locked or
// fenced yet, so a failure costs nothing but the attempt.
func (w *window) prepare(ctx context.Context) error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	token := newFenceToken()
	pctx, cancel := context.WithTimeout(ctx, mv.cfg.GateTimeout)
	bs, err := barrierSQL(pctx, p.from, mc.schema, mv.cfg.BarrierWait, token, mv.cfg.FenceLease, mc.role)
	var grant string
	if err == nil {
		grant, err = homeSQL(pctx, p.to, mc.role, mc.schema, true)
	}
	cancel()
	if err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	w.grantSQL = grant
	w.bs = bs
	w.sealSQL = sealSQL(mc.schema, token, bs.tables, 5*time.Second)
	if p.removeOnTo {
		w.removeSQL = removeBarrierSQL(mc.schema, bs.tables)
	}
	if !mc.done(p.fenced) && m.Doing != p.fenced {
		if err := mv.j.beginStep(ctx, m.ID, p.fenced); err != nil {
			return err
		}
		m.Doing = p.fenced
	}
	return nil
}

// hold waits for the cutover's turn and takes the window's connections,
// warmed: one to the catalog, one to each side, so that no step inside
// the window waits for a pool or loads a fresh backend's catalog caches.
func (w *window) hold(ctx context.Context) error {
	mv, m, p := w.mv, w.m, w.p
	t := time.Now()
	release, err := mv.phases.cutover(ctx)
	if err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	w.releases = append(w.releases, release)
	w.ct.Queue = time.Since(t)
	if w.cat, err = mv.j.s.Window(ctx); err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	w.releases = append(w.releases, w.cat.Release)
	w.nu = mv.nudger(w.mc, p.from, p.to)
	for _, c := range []struct {
		dst  **pgxpool.Conn
		pool *pgxpool.Pool
		what string
	}{{&w.from, p.from, p.fromName}, {&w.to, p.to, p.toName}} {
		if *c.dst, err = c.pool.Acquire(ctx); err != nil {
			return mv.stepFailed(ctx, m, p.fenced, fmt.Errorf("connect to %s: %w", c.what, err))
		}
		w.releases = append(w.releases, (*c.dst).Release)
		names, vals, err := warmWindowConn(ctx, *c.dst, w.bs)
		if err != nil {
			return mv.stepFailed(ctx, m, p.fenced, fmt.Errorf("%s: %w", c.what, err))
		}
		if *c.dst == w.from {
			w.seqNames, w.seqVals = names, vals
		}
	}
	return nil
}

// precarry sets the sequences on to before the fence, with twice the
// margin: unless the shard draws more than the margin from a sequence
// before the barrier, the window then carries nothing (a carry inside it
// is a round trip to to, which under load takes tens of ms). A failure
// here costs nothing: the window carries them instead.
func (w *window) precarry(ctx context.Context) {
	t := time.Now()
	pre, err := carryClock(ctx, w.to, w.mc.schema, w.seqNames, w.seqVals, 2*w.mv.cfg.SequenceMargin)
	if err != nil {
		w.mv.log.Warn("shardkit: carrying the sequences before the fence failed; the fenced window will", "move", w.m.ID, "shard", w.m.Shard, "err", err)
		pre = carriedClock{}
	}
	w.pre = pre
	w.ct.Precarry = time.Since(t)
}

// fenceAndBarrier fences the shard and opens the barrier, attempted until
// the barrier gets its locks within BarrierWait: a write transaction still
// running on the shard would otherwise hold the barrier, and every write
// queued behind it, for as long as it runs. A failed attempt unfences at
// once (writes paused for about BarrierWait) and goes back to the lag
// gate. Past GateTimeout, one last attempt waits up to 5s. It keeps: on
// success the barrier's transaction is open, its locks holding every write
// on from, and the journal says fenced.
func (w *window) fenceAndBarrier(ctx context.Context) error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	deadline := time.Now().Add(mv.cfg.GateTimeout)
	for !mc.done(p.barrier) {
		if !mc.done(p.fenced) {
			t := time.Now()
			if err := mv.lagGate(ctx, mc, w.cat, w.nu, w.from, p.to, p.slot); err != nil {
				return mv.stepFailed(ctx, m, p.fenced, err)
			}
			w.ct.Gate += time.Since(t)
		}
		w.ct.Attempts++
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
		retry, err := w.barrier(ctx, wait, last)
		if err != nil {
			return err
		}
		if !retry {
			break
		}
	}
	w.barrierOpen = !mc.done(p.barrier)
	return nil
}

// barrier opens the write barrier on from (locks, refusing trigger body,
// final LSN, sequences, newest ID) while the fence goes to the catalog,
// each on its own connection, so that the window pays the longer of the
// two, not both. It keeps: the barrier's transaction commits only once
// the fence has, so that a write the barrier refuses finds the shard
// fenced when it reloads the map; a fence that fails rolls the barrier
// back; a mover killed before the commit leaves nothing installed
// (Postgres rolls back a closed session). retry is true when the barrier
// waited too long for a running write and the shard was unfenced.
func (w *window) barrier(ctx context.Context, wait time.Duration, last bool) (retry bool, err error) {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	w.fencedAt = time.Now()
	fenced := w.fence(ctx)
	w.bar, err = openBarrier(ctx, w.from, mc.schema, w.bs.sql, wait)
	if ferr := <-fenced; ferr != nil {
		if err == nil {
			rollbackBarrier(ctx, w.from)
		}
		return false, mv.stepFailed(ctx, m, p.fenced, ferr)
	}
	mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", p.fenced, "took", w.ct.Fence.Round(time.Microsecond))
	w.ct.Barrier = max(time.Since(w.fenceEnd), 0)
	var pe *pgconn.PgError
	if err != nil && !last && errors.As(err, &pe) && pe.Code == "55P03" {
		return true, w.unfence(ctx)
	}
	if err != nil {
		return false, mv.stepFailed(ctx, m, p.barrier, err)
	}
	m.FinalLSN = w.bar.lsn
	return false, nil
}

// fence sets the map fenced and journals it, in one statement, and sends
// its outcome on the channel it returns. m is the fence's alone until it
// is done. A fence journalled already (a resumed attempt) is sent at once.
func (w *window) fence(ctx context.Context) <-chan error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	fenced := make(chan error, 1)
	if mc.done(p.fenced) {
		w.fenceEnd = w.fencedAt
		fenced <- nil
		return fenced
	}
	go func() {
		bound := mv.cfg.CutoverTimeout + 5*time.Second
		sctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		err := fenceJournalled(sctx, w.cat, m, p.fromName, router.StateFenced, mv.cfg.FenceLease, p.fenced, p.barrier)
		w.fenceEnd = time.Now()
		w.ct.Fence = w.fenceEnd.Sub(w.fencedAt)
		if err != nil && ctx.Err() == nil && sctx.Err() != nil {
			err = &timeoutError{What: "cutover step " + string(p.fenced), After: bound, Err: err}
		}
		if err == nil {
			m.Step, m.Doing, m.Error = p.fenced, mc.next(p.fenced), ""
			if mv.cfg.hook != nil {
				mv.cfg.hook(*m, p.fenced, true)
			}
		}
		fenced <- err
	}()
	return fenced
}

// unfence puts the shard back where the fence found it, in one statement,
// after a barrier that could not get its locks in time. It keeps: writes
// were paused, never refused for good, and the journal is back a step.
func (w *window) unfence(ctx context.Context) error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	prev := mc.steps[stepIndex(mc.steps, p.fenced)-1]
	if err := fenceJournalled(ctx, w.cat, m, p.fromName, p.abortState, 0, prev, p.fenced); err != nil {
		return mv.stepFailed(ctx, m, p.fenced, err)
	}
	m.Step, m.Doing = prev, p.fenced
	w.ct.Aborted = max(w.ct.Aborted, time.Since(w.fencedAt))
	mv.log.Info("shardkit: barrier waited too long for a running write; unfenced, trying again",
		"move", m.ID, "shard", m.Shard, "attempt", w.ct.Attempts, "paused", time.Since(w.fencedAt).Round(time.Microsecond))
	return nil
}

// startCarry starts the carry of the barrier's final sequence values to
// to, run while to applies the final LSN, unless the carry before the
// fence covered them.
func (w *window) startCarry(ctx context.Context) {
	if w.bar.lsn == "" {
		return
	}
	w.carried = make(chan carryResult, 1)
	if w.pre.covers(w.bar, w.mv.cfg.SequenceMargin) {
		w.carried <- carryResult{c: w.pre}
		return
	}
	w.ct.CarriedInWindow = true
	w.carryRunning = true
	done, to, schema, bar, margin := w.carried, w.to, w.mc.schema, w.bar, w.mv.cfg.SequenceMargin
	go func() {
		cctx, cancel := context.WithTimeout(ctx, w.mv.cfg.CutoverTimeout)
		defer cancel()
		c, err := carryClock(cctx, to, schema, bar.names, bar.vals, margin)
		done <- carryResult{c, err}
	}()
}

// carry is the window's sequences step: the carry's outcome, then
// the clock. It keeps: the sequences are on to, and to's clock is past
// the newest ID's millisecond, before the seal (a sealed barrier flips the
// map, carried or not). Carried before the fence, as they mostly are,
// this takes no round trip.
func (w *window) carry(ctx context.Context) error {
	err := w.mv.windowStep(ctx, w.mc, w.p.sequences, false, &w.ct.Carry, func(ctx context.Context) error {
		r := <-w.carried
		w.carried = nil
		if r.err != nil {
			return r.err
		}
		w.m.SeqValue = r.c.top
		return w.clock(ctx, r.c)
	})
	w.ct.Carry -= w.ct.Clock
	return err
}

// clock waits until to's clock, as the carry read it, is past the newest
// ID's millisecond, so that to's next_id() cannot issue an ID the source
// issued already; usually it waits for nothing.
func (w *window) clock(ctx context.Context, c carriedClock) error {
	t := time.Now()
	err := c.clockPast(ctx, w.mc.layout.UnixMsOf(w.bar.newestID))
	w.ct.Clock = time.Since(t)
	return err
}

// apply commits the barrier and waits, on the serving side, until to's
// subscription (p.slot) confirmed the final LSN: one simple-protocol
// message, so the window pays one round trip for the commit and the wait.
// It keeps: the commit (synchronous, which flushes the WAL up to the final
// LSN for the walsender) comes first, so a wait that times out leaves the
// barrier installed and unsealed, for the abort to release. The server
// stamps its clock around the wait: the breakdown reads the wait from
// those stamps and counts the rest of the round trip (travel, and the
// commit) in the barrier's step. The seal stays a round trip of its own:
// between the two, the barrier is installed under a lease that may lapse,
// which the seal must find.
func (w *window) apply(ctx context.Context) error {
	mv, m, p := w.mv, w.m, w.p
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, p.applied, false)
	}
	wait, err := slotWaitSQL(p.slot, m.FinalLSN, mv.cfg.CutoverTimeout)
	if err != nil {
		rollbackBarrier(ctx, w.from)
		return mv.stepFailed(ctx, m, p.applied, err)
	}
	bound := mv.cfg.CutoverTimeout + 5*time.Second
	sctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	const stamp = "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint"
	start := time.Now()
	var results []*pgconn.Result
	err = w.nu.during(sctx, func() (err error) {
		results, err = w.from.Conn().PgConn().Exec(sctx, strings.Join([]string{"COMMIT", stamp, wait, stamp}, ";\n")).ReadAll()
		return err
	})
	rtt := time.Since(start)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		err = &timeoutError{What: "cutover steps " + string(p.barrier) + " and " + string(p.applied), After: bound, Err: err}
	}
	if tx := w.from.Conn().PgConn().TxStatus(); tx == 'T' || tx == 'E' {
		rollbackBarrier(ctx, w.from) // the commit never ran: the barrier goes
	}
	if err := w.applyFailed(ctx, results, err); err != nil {
		return err
	}
	t1, ok1 := serverStamp(results, 1)
	t2, ok2 := serverStamp(results, 3)
	if !ok1 || !ok2 || len(results) != 4 {
		return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("wait for slot %s to confirm %s: unexpected reply (%d results)", p.slot, m.FinalLSN, len(results)))
	}
	w.ct.Apply = time.Duration(t2-t1) * time.Microsecond
	w.ct.Barrier += max(rtt-w.ct.Apply, 0)
	for _, st := range []struct {
		s    Step
		took time.Duration
	}{{p.barrier, w.ct.Barrier}, {p.applied, w.ct.Apply}} {
		mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", st.s, "took", st.took.Round(time.Microsecond))
		if mv.cfg.hook != nil {
			mv.cfg.hook(*m, st.s, true)
		}
	}
	return nil
}

// applyFailed sorts apply's failure by the step it belongs to: a commit
// that did not run is the barrier's, a wait that did not end is the
// apply's (errCutoverTimeout when its bound passed on the server).
func (w *window) applyFailed(ctx context.Context, results []*pgconn.Result, err error) error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	committed := len(results) > 0 && results[0].CommandTag.String() == "COMMIT"
	if err == nil && !committed {
		err = fmt.Errorf("install write barrier on %s: the transaction was rolled back before its commit", mc.schema)
	}
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	switch {
	case !committed && len(results) == 0:
		return mv.stepFailed(ctx, m, p.barrier, fmt.Errorf("install write barrier on %s: commit: %w", mc.schema, err))
	case !committed:
		return mv.stepFailed(ctx, m, p.barrier, err)
	case errors.As(err, &pe) && pe.Code == slotWaitSQLState:
		return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("%w (%s)", errCutoverTimeout, pe.Message))
	default:
		return mv.stepFailed(ctx, m, p.applied, fmt.Errorf("wait for slot %s to confirm %s: %w", p.slot, m.FinalLSN, err))
	}
}

// serverStamp reads the clock stamp that result i of apply's message holds.
func serverStamp(results []*pgconn.Result, i int) (int64, bool) {
	if i >= len(results) || len(results[i].Rows) != 1 || len(results[i].Rows[0]) != 1 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(results[i].Rows[0][0]), 10, 64)
	return v, err == nil
}

// seal makes the barrier refuse for good, only if its lease still holds
// on from's clock. It keeps: only a barrier sealed while its lease held
// lets the map flip (else errFenceLapsed), and it comes before the
// barrier on to is removed, so that a lapsed lease leaves to as it was.
func (w *window) seal(ctx context.Context) error {
	return w.mv.windowStep(ctx, w.mc, w.p.sealed, false, &w.ct.Seal, func(ctx context.Context) error {
		return runSeal(ctx, w.from, w.mc.schema, w.sealSQL)
	})
}

// joinSQL joins the non-empty statements into one simple-protocol text.
func joinSQL(stmts ...string) string {
	var out []string
	for _, s := range stmts {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, ";\n")
}

// flip removes the barrier on to (the target's, or the one an earlier
// cutover left there) and grants the application role the schema there,
// in one round trip, then points the map at to and journals it, in one
// statement. It keeps: the map flips only while the shard is still fenced
// on from, and to takes writes from the moment it does.
func (w *window) flip(ctx context.Context) error {
	mv, mc, m, p := w.mv, w.mc, w.m, w.p
	err := mv.windowStep(ctx, mc, p.flipped, true, &w.ct.Flip, func(ctx context.Context) error {
		if on := joinSQL(w.removeSQL, w.grantSQL); on != "" {
			if _, err := w.to.Exec(ctx, on, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("remove write barrier on %s: %w", mc.schema, err)
			}
		}
		return flipJournalled(ctx, w.cat, m, p.fromName, p.toName, p.flipped, mc.next(p.flipped))
	})
	if err == nil {
		m.FencedFor = time.Since(w.fencedAt)
	}
	return err
}

// record keeps the window's breakdown in the journal, with, for a move,
// where reverse replication starts: to's position at the end of the last
// change its subscription applied.
func (w *window) record(ctx context.Context) error {
	mv, m, p := w.mv, w.m, w.p
	m.Cutover = w.ct
	if p.captureTargetLSN {
		var err error
		if m.TargetLSN, err = originLSN(ctx, p.to, p.slot); err != nil {
			return err
		}
	}
	mv.log.Info("shardkit: "+p.what+" fenced window", "move", m.ID, "shard", m.Shard,
		"fenced", m.FencedFor.Round(time.Microsecond), "steps", w.ct.String())
	return mv.j.recordCutover(ctx, m.ID, m.FencedFor, w.ct, m.TargetLSN)
}
