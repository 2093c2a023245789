package rebalance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/catalogmove"
)

// sqlRatesSample reads, in one statement, the serving side's WAL write
// position and the position the slot's consumer confirmed, as byte
// offsets: their advance over time is the write rate, their difference the
// lag as the source sees it.
const sqlRatesSample = `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
	pg_wal_lsn_diff(coalesce(confirmed_flush_lsn, '0/0'), '0/0')::bigint
	FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1`

// sqlReceived reads, on the target, the position its apply worker has taken
// from the stream: the worker applies each change as it takes it, so this is
// where it applies (0 while no worker runs). The slot's confirmed position
// alone does not say: the subscriber reports it only when its socket runs
// dry or a keepalive asks, so a target busy with a backlog applies for
// seconds with the confirmed position standing still
// (TestCatchUpSeesABusyTarget).
const sqlReceived = `SELECT coalesce(max(pg_wal_lsn_diff(received_lsn, '0/0')), 0)::bigint
	FROM pg_stat_subscription WHERE subname = $1 AND relid IS NULL`

// rateWindow is how far back the rates look: long enough to smooth the
// bursts of a busy writer and of an apply worker that reports its
// position in steps, short enough to follow a writer that slows down.
const rateWindow = 2 * time.Second

// rateSample is one reading of the source's and the target's positions.
type rateSample struct {
	at      time.Time
	wal     int64 // the source's WAL write position
	applied int64 // the farthest of the slot's confirmed and the target's received position
}

// rateMeter keeps the recent readings of one move's forward replication.
type rateMeter struct {
	samples []rateSample
	still   time.Time // since when the applied position has not moved while behind (zero: it moves)
	told    time.Time // when a stall was last reported
}

// stallAfter is how long a replica behind its source may apply nothing
// before a move reports the stall, with what the replication's processes
// wait on (explainStall); it reports again every stallAfter while it lasts.
const stallAfter = 10 * time.Second

// stalled reports, at most once per stallAfter, how long the applied
// position has stood still while the target is behind.
func (rm *rateMeter) stalled() (time.Duration, bool) {
	n := len(rm.samples)
	if rm.still.IsZero() || n == 0 {
		return 0, false
	}
	at := rm.samples[n-1].at
	if d := at.Sub(rm.still); d >= stallAfter && at.Sub(rm.told) >= stallAfter {
		rm.told = at
		return d, true
	}
	return 0, false
}

// stuckFor reports whether the applied position has stood still, while
// behind, for at least d.
func (rm *rateMeter) stuckFor(d time.Duration) bool {
	n := len(rm.samples)
	return !rm.still.IsZero() && n > 0 && rm.samples[n-1].at.Sub(rm.still) >= d
}

// rates is the replication's pace as a move measures it while it waits to
// fence: the serving side's WAL write rate, the rate at which the target
// applies it, and the lag between them, in bytes (the whole server's WAL,
// which the slot's consumer reads past too).
type rates struct {
	Write, Apply float64 // bytes per second, over the last few seconds
	Lag          int64   // bytes of WAL the target has not yet applied or confirmed
}

// drain is how long the target would take to apply the lag if the writes
// stopped now, as they do at the fence; -1 when nothing is applied.
func (r rates) drain() time.Duration {
	if r.Lag <= 0 {
		return 0
	}
	if r.Apply <= 0 {
		return -1
	}
	return time.Duration(float64(r.Lag) / r.Apply * float64(time.Second))
}

// behind reports a replica that loses ground: the lag is real (at least
// floor bytes) and the shard is written faster than the target applies,
// so waiting makes the fenced window longer, not shorter.
func (r rates) behind(floor int64) bool {
	return r.Lag >= floor && r.Write > r.Apply
}

// fits reports whether the lag drains within bound once writes stop.
func (r rates) fits(bound time.Duration) bool {
	d := r.drain()
	return d >= 0 && d <= bound
}

// add records a reading: the applied position never goes back, and a
// position that stands still while the source is ahead starts (or goes on
// with) a stall. It returns the reading as recorded.
func (rm *rateMeter) add(s rateSample) rateSample {
	if n := len(rm.samples); n > 0 {
		prev := rm.samples[n-1].applied
		switch {
		case s.applied > prev || s.wal <= s.applied:
			rm.still = time.Time{}
		case rm.still.IsZero():
			rm.still = s.at
		}
		s.applied = max(s.applied, prev)
	}
	rm.samples = append(rm.samples, s)
	return s
}

// sample reads the slot on the source (src) and the subscription on the
// target (tgt), both named name, once, and returns the rates over the
// readings of the last rateWindow; ok is false until two readings at least
// 100ms apart exist.
func (rm *rateMeter) sample(ctx context.Context, src, tgt querier, name string) (r rates, ok bool, err error) {
	var s rateSample
	var confirmed, received int64
	err = src.QueryRow(ctx, sqlRatesSample, name).Scan(&s.wal, &confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return rates{}, false, fmt.Errorf("replication slot %s is missing on the source; roll the move back", name)
	}
	if err != nil {
		return rates{}, false, fmt.Errorf("read the pace of slot %s: %w", name, err)
	}
	if err := tgt.QueryRow(ctx, sqlReceived, name).Scan(&received); err != nil {
		return rates{}, false, fmt.Errorf("read the apply position of subscription %s on the target: %w", name, err)
	}
	s.at = time.Now()
	// Positions applied never go back; a restarted apply worker reports
	// nothing received until its first change.
	s.applied = max(confirmed, received)
	s = rm.add(s)
	// Keep the newest reading older than the window, so that a slow
	// reader (one a second) still has a span to measure.
	for len(rm.samples) > 2 && s.at.Sub(rm.samples[1].at) >= rateWindow {
		rm.samples = rm.samples[1:]
	}
	r.Lag = max(s.wal-s.applied, 0)
	first := rm.samples[0]
	span := s.at.Sub(first.at).Seconds()
	if span < 0.1 {
		return r, false, nil
	}
	r.Write = float64(s.wal-first.wal) / span
	r.Apply = float64(s.applied-first.applied) / span
	return r, true, nil
}

// sqlStallSource and sqlStallTarget describe, for the log of a stalled
// replication, what its processes are doing: on the source the walsender
// of the slot (its wait, the positions its consumer reported), on the
// target the apply worker (its wait, when it last heard from the source)
// and the target's own standbys, whose confirmation a synchronous commit
// of the worker waits for.
const (
	sqlStallSource = `SELECT coalesce((SELECT format('walsender pid %s waits on %s, WAL at %s, sent %s, flushed %s (reply %s ago), slot confirmed %s',
		a.pid, coalesce(a.wait_event_type || ':' || a.wait_event, 'nothing (running)'), pg_current_wal_lsn(), r.sent_lsn, r.flush_lsn,
		now() - r.reply_time, sl.confirmed_flush_lsn)
		FROM pg_replication_slots sl JOIN pg_stat_activity a ON a.pid = sl.active_pid LEFT JOIN pg_stat_replication r ON r.pid = a.pid
		WHERE sl.slot_name = $1), 'no walsender holds the slot')`
	sqlStallTarget = `SELECT coalesce((SELECT format('apply worker pid %s waits on %s, received %s, last message from the source %s ago',
		a.pid, coalesce(a.wait_event_type || ':' || a.wait_event, 'nothing (running)'), s.received_lsn, now() - s.last_msg_receipt_time)
		FROM pg_stat_subscription s JOIN pg_stat_activity a ON a.pid = s.pid WHERE s.subname = $1 AND s.relid IS NULL), 'no apply worker runs')
		|| format('; WAL at %s (flushed %s), synchronous_standby_names %L; standbys: ', pg_current_wal_lsn(), pg_current_wal_flush_lsn(), current_setting('synchronous_standby_names'))
		|| coalesce((SELECT string_agg(format('%s %s (%s), sent %s, written %s, flushed %s (reply %s ago)',
			application_name, state, sync_state, sent_lsn, write_lsn, flush_lsn, now() - reply_time), ', ')
		FROM pg_stat_replication WHERE application_name <> $1), 'none')`
)

// Stall messages: a target behind its source that applied nothing, and a
// lag gate whose probes the target confirmed none of (a target that
// applies but reports no confirmation leaves the slot's confirmed
// position, which the probes wait for, standing still).
const (
	msgStalled = "shardkit: the move's target has applied nothing while behind its source"
	msgSilent  = "shardkit: the move's target has confirmed none of the lag gate's probes"
)

// explainStall logs a forward replication that waited d (msg says on
// what), with what its processes wait on: a move that waits on it says why
// instead of only counting down its timeout. attrs go after the duration.
// The readings are best effort; a failed one is logged as such.
func (mv *Mover) explainStall(ctx context.Context, mc *moveCtx, src, tgt querier, slot, msg string, d time.Duration, attrs ...any) {
	read := func(q querier, sql string) string {
		var out string
		if err := q.QueryRow(ctx, sql, slot).Scan(&out); err != nil {
			return "unreadable: " + err.Error()
		}
		return out
	}
	args := append([]any{"move", mc.m.ID, "shard", mc.m.Shard, "for", d.Round(time.Second)}, attrs...)
	mv.log.Warn(msg, append(args, "source", read(src, sqlStallSource), "target", read(tgt, sqlStallTarget))...)
}

// catchUpError returns the error of a replica that cannot catch up.
func (mv *Mover) catchUpError(r rates, waited time.Duration) *catchUpError {
	return &catchUpError{WriteRate: r.Write, ApplyRate: r.Apply, Lag: r.Lag, Drain: r.drain(),
		Bound: mv.cfg.DrainBound, Waited: waited}
}

// waitCaughtUp waits until the forward slot's lag is under CatchUpBytes,
// or, for a shard written faster than the target applies, until the lag
// left would drain within DrainBound once fenced (the lag gate decides
// then). A replica that still loses ground after CatchUpTimeout stops the
// step with a *catchUpError: nothing is fenced and the move is resumable.
func (mv *Mover) waitCaughtUp(ctx context.Context, mc *moveCtx) error {
	var rm rateMeter
	nu := mv.nudger(mc, mc.src, mc.tgt)
	start := time.Now()
	var first int64 = -1
	for {
		r, ok, err := rm.sample(ctx, mc.src, mc.tgt, mc.n.fwd)
		if err != nil {
			return err
		}
		nu.nudgeIfDue(ctx, rm.stuckFor(nudgeEvery))
		if first < 0 {
			first = max(r.Lag, 1)
		}
		mv.reportRates(mc, "catchup", max(first-r.Lag, 0), first, r)
		if d, ok := rm.stalled(); ok {
			mv.explainStall(ctx, mc, mc.src, mc.tgt, mc.n.fwd, msgStalled, d, "lag", r.Lag)
		}
		if r.Lag < mv.cfg.CatchUpBytes {
			mv.reportRates(mc, "catchup", first, first, r)
			return nil
		}
		if ok && r.behind(mv.cfg.CatchUpBytes) {
			if r.fits(mv.cfg.DrainBound) {
				return nil
			}
			if waited := time.Since(start); waited >= mv.cfg.CatchUpTimeout {
				return mv.catchUpError(r, waited)
			}
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// reportRates is report for the waits that measure the replication's pace.
func (mv *Mover) reportRates(mc *moveCtx, phase string, done, total int64, r rates) {
	if mv.cfg.Progress != nil {
		mv.cfg.Progress(Progress{MoveID: mc.m.ID, Shard: mc.m.Shard, Phase: phase, Done: min(done, total), Total: total,
			WriteRate: r.Write, ApplyRate: r.Apply, Lag: r.Lag})
	}
}

// gateCalm is how many quick tries in a row open the lag gate.
const gateCalm = 2

// lagGate waits for a moment when a cutover would be quick: a catalog
// round trip plus the replica's confirmation of a probe written on the
// serving side, back to back, take at most Config.CutoverLag (from is the
// serving side, to the side that subscribes to it). The probe is
// what the fenced window's wait for the final LSN will see, and the round
// trip what its map changes will. It opens after gateCalm such tries in a
// row: on a machine short of CPU one quick try is often luck, while a few
// in a row mean the servers get scheduled.
//
// A shard written faster than the target applies never gets there, and
// waiting only lets its lag grow: for it the gate opens as soon as the lag
// would drain within DrainBound once the fence stops the writes, and
// stops with a *catchUpError after CatchUpTimeout if it never would. Each
// probe waits at most rateWindow (or CutoverLag, if longer), so that the
// rates are read that often; the gate gives up after GateTimeout with a
// *lagGateError.
func (mv *Mover) lagGate(ctx context.Context, mc *moveCtx, cat *catalogmove.Window, nu *nudger, from *pgxpool.Conn, to querier, slot string) error {
	begin := time.Now()
	deadline := begin.Add(mv.cfg.GateTimeout)
	giveUp := begin.Add(min(mv.cfg.CatchUpTimeout, mv.cfg.GateTimeout))
	var rm rateMeter
	best := time.Duration(-1)
	calm := 0
	confirmed, told := begin, begin // the last probe confirmed, the last silence reported
	for tries := 1; ; tries++ {
		r, measured, err := rm.sample(ctx, from, to, slot)
		if err != nil {
			return fmt.Errorf("lag gate: %w", err)
		}
		if d, ok := rm.stalled(); ok {
			mv.explainStall(ctx, mc, from, to, slot, msgStalled, d, "lag", r.Lag)
		}
		if measured && r.behind(mv.cfg.CatchUpBytes) {
			mv.reportRates(mc, "gate", 0, 0, r)
			if r.fits(mv.cfg.DrainBound) {
				mv.log.Info("shardkit: lag gate: the shard is written faster than its target applies; fencing while the lag drains within the bound",
					"move", mc.m.ID, "shard", mc.m.Shard, "write_bps", int64(r.Write), "apply_bps", int64(r.Apply), "lag", r.Lag, "drain", r.drain(), "bound", mv.cfg.DrainBound)
				return nil
			}
			if time.Now().After(giveUp) {
				return mv.catchUpError(r, time.Since(begin))
			}
		}
		start := time.Now()
		if err := cat.Ping(ctx); err != nil {
			return fmt.Errorf("lag gate: catalog: %w", err)
		}
		wait := min(mv.cfg.CutoverTimeout, max(mv.cfg.CutoverLag, rateWindow), max(time.Until(deadline), time.Millisecond))
		err = nu.during(ctx, func() error {
			_, err := waitCurrentOn(ctx, from, slot, sqlGateProbe, wait)
			return err
		})
		d := time.Since(start)
		if err != nil && !errors.Is(err, errCutoverTimeout) {
			return fmt.Errorf("lag gate: %w", err)
		}
		if now := time.Now(); err == nil {
			confirmed = now
		} else if now.Sub(confirmed) >= stallAfter && now.Sub(told) >= stallAfter {
			told = now
			mv.explainStall(ctx, mc, from, to, slot, msgSilent, now.Sub(confirmed))
		}
		if err == nil && d <= mv.cfg.CutoverLag {
			if calm++; calm >= gateCalm {
				return nil
			}
			continue
		}
		calm = 0
		if err == nil && (best < 0 || d < best) {
			best = d
		}
		if time.Now().After(deadline) {
			if best < 0 {
				best = mv.cfg.GateTimeout
			}
			return &lagGateError{Best: best, Bound: mv.cfg.CutoverLag, Tries: tries}
		}
	}
}
