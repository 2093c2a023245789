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
	if n := len(rm.samples); n > 0 {
		s.applied = max(s.applied, rm.samples[n-1].applied)
	}
	rm.samples = append(rm.samples, s)
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
	start := time.Now()
	var first int64 = -1
	for {
		r, ok, err := rm.sample(ctx, mc.src, mc.tgt, mc.n.fwd)
		if err != nil {
			return err
		}
		if first < 0 {
			first = max(r.Lag, 1)
		}
		mv.reportRates(mc, "catchup", max(first-r.Lag, 0), first, r)
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
func (mv *Mover) lagGate(ctx context.Context, mc *moveCtx, cat *catalogmove.Window, from *pgxpool.Conn, to querier, slot string) error {
	begin := time.Now()
	deadline := begin.Add(mv.cfg.GateTimeout)
	giveUp := begin.Add(min(mv.cfg.CatchUpTimeout, mv.cfg.GateTimeout))
	var rm rateMeter
	best := time.Duration(-1)
	calm := 0
	for tries := 1; ; tries++ {
		r, measured, err := rm.sample(ctx, from, to, slot)
		if err != nil {
			return fmt.Errorf("lag gate: %w", err)
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
		_, err = waitCurrentOn(ctx, from, slot, sqlGateProbe, wait)
		d := time.Since(start)
		if err != nil && !errors.Is(err, errCutoverTimeout) {
			return fmt.Errorf("lag gate: %w", err)
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
