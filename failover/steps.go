package failover

import (
	"context"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// fence fences every shard of the server in the catalog: routers that see
// it hold their writes there.
func (s *switchover) fence(ctx context.Context) (string, error) {
	n, err := s.cat.FenceServer(ctx, s.name, s.opts.Lease)
	if err != nil {
		return "", err
	}
	s.fenced, s.fencedAt, s.rep.Shards = true, time.Now(), n
	return fmt.Sprintf("%d shards fenced in the catalog: writes wait", n), nil
}

// setReadOnly makes every new transaction on the old primary read-only:
// a router that has not seen the fence yet is refused (25006) and waits
// on the fence it then finds. The setting is the host's own
// (postgresql.auto.conf), not replicated to the standby.
func (s *switchover) setReadOnly(ctx context.Context) (string, error) {
	if err := s.exec(ctx, s.old, sqlReadOnlyOn); err != nil {
		return "", err
	}
	s.readOnly = true
	if err := s.exec(ctx, s.old, sqlReload); err != nil {
		return "", err
	}
	return "default_transaction_read_only = on on " + s.rep.Old, nil
}

// drain waits until no transaction that began before the read-only
// setting reached every backend of the old primary runs: after that no
// write can commit there.
func (s *switchover) drain(ctx context.Context) (string, error) {
	var since time.Time
	if err := poll(ctx, 2*time.Second, func() (bool, error) {
		c, err := s.connect(ctx, s.rep.Old)
		if err != nil {
			return false, err
		}
		defer c.Close(ctx)
		var on bool
		err = c.QueryRow(ctx, sqlReadOnlySeen).Scan(&on, &since)
		return on, err
	}); err != nil {
		return "", fmt.Errorf("the old primary did not take default_transaction_read_only: %w", err)
	}
	var left int
	err := poll(ctx, s.opts.DrainWait, func() (bool, error) {
		err := s.old.QueryRow(ctx, sqlWritesBefore, since).Scan(&left)
		return left == 0, err
	})
	if err != nil {
		return "", fmt.Errorf("%w: %d transactions begun before the old primary went read-only still run after %v: end them or give a longer --drain: %w",
			ErrWritesRunning, left, s.opts.DrainWait, err)
	}
	return "no write transaction left on " + s.rep.Old, nil
}

// replay waits until the standby has replayed the old primary's last WAL
// position: it has every write the old primary acknowledged.
//
// With writes held, the old primary's last flush may be the only wakeup
// its walsender gets, and since PostgreSQL 16 a walsender can sleep
// through a flush that lands while it is about to sleep (see
// rebalance's nudge.go): it then sends the last bytes only when the
// standby's next status report arrives, wal_receiver_status_interval (10 s
// by default) later, past ReplayWait. So while the standby is behind, the
// wait reloads the old primary's configuration every replayWakeEvery: the
// reload sets every walsender's latch, and a walsender woken sends what is
// flushed. It writes nothing (the old primary is read-only by then).
func (s *switchover) replay(ctx context.Context) (string, error) {
	if err := s.old.QueryRow(ctx, sqlFinalLSN).Scan(&s.rep.FinalLSN); err != nil {
		return "", err
	}
	wake := time.Now().Add(replayWakeEvery)
	woken := 0
	err := poll(ctx, s.opts.ReplayWait, func() (bool, error) {
		var ok bool
		if err := s.standby.QueryRow(ctx, sqlReplayed, s.rep.FinalLSN).Scan(&ok); err != nil || ok {
			return ok, err
		}
		if time.Now().After(wake) {
			if err := s.exec(ctx, s.old, sqlReload); err != nil {
				return false, err
			}
			woken++
			wake = time.Now().Add(replayWakeEvery)
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("%w: %s not replayed %s within %v (%s; walsender wake-ups: %d): %w",
			ErrReplayBehind, s.rep.New, s.rep.FinalLSN, s.opts.ReplayWait, s.replayState(context.WithoutCancel(ctx)), woken, err)
	}
	if woken > 0 {
		return fmt.Sprintf("%s replayed %s (walsender wake-ups on the old primary: %d)", s.rep.New, s.rep.FinalLSN, woken), nil
	}
	return fmt.Sprintf("%s replayed %s", s.rep.New, s.rep.FinalLSN), nil
}

// replayWakeEvery is how long the replay wait lets the standby be behind
// before it wakes the old primary's walsenders, and again after each time.
const replayWakeEvery = 250 * time.Millisecond

// replayState says, for a replay that did not end in time, where the old
// primary's walsenders and the standby stand (best effort).
func (s *switchover) replayState(ctx context.Context) string {
	var old, standby string
	if err := s.old.QueryRow(ctx, sqlWalSenders).Scan(&old); err != nil {
		old = "old primary unreadable: " + err.Error()
	}
	if err := s.standby.QueryRow(ctx, sqlStandbyAt).Scan(&standby); err != nil {
		standby = "standby unreadable: " + err.Error()
	}
	return old + "; " + standby
}

// promote promotes the standby with pg_promote() and waits until it
// takes writes.
func (s *switchover) promote(ctx context.Context) (string, error) {
	var ok bool
	err := s.standby.QueryRow(ctx, sqlPromote, 60).Scan(&ok)
	if err == nil && !ok {
		err = fmt.Errorf("pg_promote() returned false after 60 s")
	}
	if err != nil {
		// A promotion that errored may still have happened.
		var rec bool
		if qerr := s.standby.QueryRow(context.WithoutCancel(ctx), "SELECT pg_is_in_recovery()").Scan(&rec); qerr != nil || !rec {
			s.promoted = true
		}
		return "", fmt.Errorf("%w: %s: %w", ErrPromote, s.rep.New, err)
	}
	s.promoted = true
	return s.rep.New + " promoted", nil
}

// record records the promoted standby as the server's primary, in a new
// map version with the shards still fenced: routers that see it open new
// pools, whose connections go to the new primary only.
func (s *switchover) record(ctx context.Context) (string, error) {
	got, err := router.ReadPrimary(ctx, s.standby.PgConn())
	if err != nil {
		return "", err
	}
	if err := s.old.QueryRow(ctx, sqlClock).Scan(&s.recordedAt); err != nil {
		return "", err
	}
	if err := s.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		_, err := tx.RecordPrimary(ctx, s.name, got)
		return err
	}); err != nil {
		return "", err
	}
	s.rep.Primary = got
	return fmt.Sprintf("primary recorded: %s (%s)", s.rep.New, got), nil
}

// endSessions waits until every session on the old primary is idle since
// the record (the routers that read there have seen it) and ends the
// sessions left there, so that it answers no read once writes go to the
// new primary: a router whose map is older than the record finds its
// connection gone, and no new one reaches the old primary (it is
// read-only, and the DSN asks for a writable host).
func (s *switchover) endSessions(ctx context.Context) (string, error) {
	db := s.cfg.Database
	var n int
	_ = poll(ctx, s.opts.SessionWait, func() (bool, error) {
		err := s.old.QueryRow(ctx, sqlSessionsOf, db, s.recordedAt).Scan(&n)
		return n == 0, err
	})
	if err := s.old.QueryRow(ctx, sqlEndSessions, db).Scan(&s.rep.Terminated); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d sessions left on %s ended", s.rep.Terminated, s.rep.Old), nil
}

// release ends the fence: held writes go on, to the new primary.
func (s *switchover) release(ctx context.Context) (string, error) {
	n, err := s.cat.UnfenceServer(ctx, s.name, router.Primary{})
	if err != nil {
		return "", err
	}
	s.fenced = false
	s.rep.Fenced = time.Since(s.fencedAt)
	return fmt.Sprintf("%d shards released after %v fenced", n, s.rep.Fenced.Round(time.Millisecond)), nil
}

// poll runs cond every 2 ms until it holds, fails, or wait passes.
func poll(ctx context.Context, wait time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(wait)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
