package rebalance

import (
	"context"
	"testing"
	"time"
)

// TestCatchUpSeesABusyTarget: a target working through a backlog applies
// steadily while the slot's confirmed position stands still (its
// subscriber reports only when its socket runs dry or a keepalive asks).
// The catch-up's meter must see it apply: read from the slot alone, it saw
// "target applying 0 B/s" and stopped a move whose replica was catching up
// (TestHotShardMove's resume failed so once under make test's load;
// docs/reliability.md). Here the target applies at 2ms a row behind 4000
// rows, so its socket never runs dry while the test reads.
func TestCatchUpSeesABusyTarget(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2)
	seedPhotos(t, e, 0, 10)
	var flatSpans, seen int
	mv := e.mover(t, Config{hook: func(m Move, s Step, done bool) {
		if s != stepSubscribed || !done || m.Target != "s1" {
			return
		}
		defer func() {
			if _, err := e.pools["s1"].Exec(ctx, `DELETE FROM public.slow_apply`); err != nil {
				t.Error(err)
			}
		}()
		n, err := moveNames(m)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := e.pools["s1"].Exec(ctx, slowApplySQL); err != nil {
			t.Error(err)
			return
		}
		for range 200 {
			if _, err := e.pools["s0"].Exec(ctx, `INSERT INTO shard_0000.photos (user_id, caption) SELECT 0, 'backlog' FROM generate_series(1, 20)`); err != nil {
				t.Error(err)
				return
			}
		}
		// Read until the meter has measured a span of the window in which
		// the slot confirmed nothing (bounded: the backlog takes 8s to
		// apply at 2ms a row, more on a loaded machine).
		var rm rateMeter
		type reading struct {
			at        time.Time
			confirmed int64
		}
		var readings []reading
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			r, ok, err := rm.sample(ctx, e.pools["s0"], e.pools["s1"], n.fwd)
			if err != nil {
				t.Error(err)
				return
			}
			var confirmed int64
			if err := e.pools["s0"].QueryRow(ctx, `SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1`, n.fwd).Scan(&confirmed); err != nil {
				t.Error(err)
				return
			}
			now := time.Now()
			readings = append(readings, reading{now, confirmed})
			// The meter's window: its first sample is at most rateWindow
			// (plus one reading) back.
			flat := ok
			for i := len(readings) - 1; flat && i >= 0 && now.Sub(readings[i].at) <= rateWindow; i-- {
				flat = readings[i].confirmed == confirmed
			}
			if flat && now.Sub(readings[0].at) >= rateWindow {
				flatSpans++
				if r.Apply > 0 {
					seen++
					t.Logf("the slot confirmed nothing for %v; the meter saw the target apply %.0f B/s, lag %d B", rateWindow, r.Apply, r.Lag)
					return
				}
				t.Logf("the slot confirmed nothing for %v and the meter saw no apply: %+v", rateWindow, r)
			}
			time.Sleep(50 * time.Millisecond) // a sampling period, not a wait for a condition
		}
	}})
	if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err != nil {
		t.Fatalf("move: %v", err)
	}
	if flatSpans == 0 {
		t.Fatal("the slot's confirmed position never stood still for a whole window while the target worked through the backlog: the test did not make the case it is for")
	}
	if seen == 0 {
		t.Errorf("in %d windows with the slot confirming nothing, the meter never saw the target apply", flatSpans)
	}
}
