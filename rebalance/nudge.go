package rebalance

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Why a move nudges the servers' walsenders.
//
// Since PostgreSQL 16 a walsender that has sent every flushed byte sleeps
// on a condition variable that a WAL flush broadcasts to, but it joins the
// variable's wait list only after it has looked for WAL to send (WalSndLoop
// calls XLogSendPhysical, then WalSndWait prepares to sleep). A flush that
// lands between the two wakes nobody: the walsender sleeps, with WAL to
// send, until something else wakes it (its client writing to the socket,
// a later flush, its timeout). In the runs seen that took about 10 s, a
// standby's wal_receiver_status_interval by default; one run with the
// standby's interval at 60 s still ended after 11 s, so something else
// ends it too. Before 16 a flush set every walsender's latch, which is
// not lost.
//
// A move meets it on a target with a synchronous standby. Each transaction
// the subscription applies commits, flushes and waits (SyncRep) for the
// standby; the next one commits as soon as the standby's reply releases
// it, which is when the walsender, having processed that reply, looks for
// WAL and goes back to sleep: the race above, once per transaction. On 17
// and 18 a backlog of a few thousand transactions was seen to take
// minutes, the apply worker on SyncRep and the target's walsender holding
// flushed WAL (TestMoveDrainsBehindASynchronousStandby). A logical
// walsender on the source waits for WAL the same way, and a move's
// barrier and probes are flushes it may sleep through.
//
// The cure is another flush: any flush broadcasts to the walsenders
// asleep by then. While a move waits on its replication (the catch-up, the
// lag gate's probes, the fenced window's wait for the final LSN, verify),
// it looks on each side every nudgeEvery for a synchronous standby's
// walsender that has sent nothing since the last look while flushed WAL
// waits for it, and if it finds one it commits a small transaction there,
// flushed locally (synchronous_commit = local: it does not wait for the
// standby it wakes). A walsender that is merely busy moves between two
// looks and is left alone. A flush is enough: the walsender that missed
// one is on the variable's wait list by the time the move looks. (A
// configuration reload would set every process's latch too, but it would
// also apply any edit an operator made to the server's configuration and
// has not reloaded yet; a move does not do that.) A role that cannot read the walsenders'
// positions (without pg_read_all_stats) sees neither their state nor how
// far they sent; for it the move commits blind, at most every
// nudgeBlindEvery.
const (
	sqlNudgeLook = `SELECT pid, coalesce(sent_lsn::text, '') FROM pg_stat_replication
	WHERE (sync_state IN ('sync', 'quorum') AND sent_lsn < pg_current_wal_flush_lsn()) OR sync_state IS NULL`
	sqlNudgeFlush = `SET LOCAL synchronous_commit = local; SELECT txid_current()`
)

// nudgeEvery is how often a move looks for a walsender asleep with WAL to
// send while it waits on its replication: a lost wakeup then costs the
// wait about twice this, instead of a standby's status interval. A look
// is one read of pg_stat_replication.
var nudgeEvery = 10 * time.Millisecond

// nudgeBlindEvery bounds the commits of a role that cannot see how far the
// walsenders sent.
const nudgeBlindEvery = 100 * time.Millisecond

// nudgeTimeout bounds one nudge; a nudge is best effort.
const nudgeTimeout = 2 * time.Second

// nudger nudges the walsenders of a move's servers and counts the flushes
// it made.
type nudger struct {
	sides []*nudgeSide
	log   func(flushes int64) // told of the first flush and every 100th
	n     atomic.Int64        // nudges that flushed a transaction
	busy  sync.Mutex          // one round of looks at a time
	last  time.Time           // when nudgeIfDue last ran (its caller's goroutine)
}

// nudgeSide is one server's walsenders as the last look saw them.
type nudgeSide struct {
	p     *pgxpool.Pool
	sent  map[int32]string // pid → sent position, of those behind
	blind time.Time        // the last blind commit
}

// nudger returns a nudger of pools that logs, as part of mc's move, that
// it had to wake a walsender: a wait that needed it says so.
func (mv *Mover) nudger(mc *moveCtx, pools ...*pgxpool.Pool) *nudger {
	nu := &nudger{log: func(n int64) {
		mv.log.Info("shardkit: woke a server's walsenders while waiting for the move's replication (a PostgreSQL 16+ walsender can sleep through a WAL flush until its standby's next status report)",
			"move", mc.m.ID, "shard", mc.m.Shard, "flushes", n)
	}}
	for _, p := range pools {
		nu.sides = append(nu.sides, &nudgeSide{p: p})
	}
	return nu
}

// look reads the side's walsenders and reports whether one needs a
// flush: it sent nothing since the last look though flushed WAL waits, or
// the role cannot tell and the last blind flush is nudgeBlindEvery old.
func (ns *nudgeSide) look(ctx context.Context, conn *pgxpool.Conn) (bool, error) {
	rows, err := conn.Query(ctx, sqlNudgeLook)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	seen := map[int32]string{}
	stuck, blind := false, false
	for rows.Next() {
		var pid int32
		var sent string
		if err := rows.Scan(&pid, &sent); err != nil {
			return false, err
		}
		if sent == "" {
			blind = true
			continue
		}
		seen[pid] = sent
		if prev, ok := ns.sent[pid]; ok && prev == sent {
			stuck = true
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	ns.sent = seen
	if !stuck && blind && time.Since(ns.blind) >= nudgeBlindEvery {
		ns.blind, stuck = time.Now(), true
	}
	return stuck, nil
}

// nudge looks at the side once and flushes a transaction there if a
// walsender needs it; it reports whether it did.
func (ns *nudgeSide) nudge(ctx context.Context) bool {
	conn, err := ns.p.Acquire(ctx)
	if err != nil {
		return false
	}
	defer conn.Release()
	if stuck, err := ns.look(ctx, conn); err != nil || !stuck {
		return false
	}
	_, err = conn.Conn().PgConn().Exec(ctx, sqlNudgeFlush).ReadAll()
	return err == nil
}

// nudgeIfDue nudges when the last nudge is nudgeEvery old, for loops that
// poll (the catch-up's): stuck is whether their replica made no progress
// for nudgeEvery.
func (nu *nudger) nudgeIfDue(ctx context.Context, stuck bool) {
	if !stuck || time.Since(nu.last) < nudgeEvery {
		return
	}
	nu.last = time.Now()
	nu.nudgeAll(ctx)
}

// nudgeAll nudges every side once, unless a round is already under way.
func (nu *nudger) nudgeAll(ctx context.Context) {
	if !nu.busy.TryLock() {
		return
	}
	defer nu.busy.Unlock()
	for _, ns := range nu.sides {
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nudgeTimeout)
		if ns.nudge(nctx) {
			if n := nu.n.Add(1); nu.log != nil && n%100 == 1 {
				nu.log(n)
			}
		}
		cancel()
	}
}

// during runs wait, and nudges every nudgeEvery from a goroutine of its
// own while wait runs: the wait's timing is not the nudges', and a round
// in flight when wait returns finishes on its own.
func (nu *nudger) during(ctx context.Context, wait func() error) error {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(nudgeEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case <-done:
					return
				default:
				}
				nu.nudgeAll(ctx)
			}
		}
	}()
	defer close(done)
	return wait()
}
