package rebalance

import (
	"testing"
	"time"
)

// TestRatesDecide pins the hot-shard decisions on hand-made rates: the
// drain time is lag over apply rate, a replica is behind only with a real
// lag and a writer faster than it, and the fence waits for a drain within
// the bound.
func TestRatesDecide(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name   string
		r      rates
		drain  time.Duration
		behind bool
		fits   bool
	}{
		{"caught up", rates{Write: 5 * mib, Apply: 5 * mib, Lag: 0}, 0, false, true},
		{"keeps up with a small lag", rates{Write: mib, Apply: 2 * mib, Lag: 512 << 10}, 250 * time.Millisecond, false, true},
		{"hot, drains in time", rates{Write: 8 * mib, Apply: 4 * mib, Lag: 2 * mib}, 500 * time.Millisecond, true, true},
		{"hot, too far behind", rates{Write: 2 * mib, Apply: 200 << 10, Lag: 10 * mib}, 51200 * time.Millisecond, true, false},
		{"nothing applied", rates{Write: mib, Apply: 0, Lag: 3 * mib}, -1, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := c.r.drain(); d != c.drain {
				t.Errorf("drain = %v, want %v", d, c.drain)
			}
			if b := c.r.behind(mib); b != c.behind {
				t.Errorf("behind = %v, want %v", b, c.behind)
			}
			if f := c.r.fits(time.Second); f != c.fits {
				t.Errorf("fits 1s = %v, want %v", f, c.fits)
			}
		})
	}
	e := &catchUpError{WriteRate: 2 * mib, ApplyRate: 200 << 10, Lag: 10 * mib, Drain: 51200 * time.Millisecond, Bound: time.Second, Waited: time.Minute}
	want := errCatchUp.Error() + " (after 1m0s: source written at 2.0 MiB/s, target applying 200.0 KiB/s, lag 10.0 MiB would drain in 51.2s, bound Config.DrainBound 1s)"
	if e.Error() != want {
		t.Errorf("catchUpError:\n%s\nwant\n%s", e, want)
	}
}

// TestRateMeterStall pins when a move reports a stalled replica: only
// after the applied position stood still for stallAfter while the source
// was ahead, then once per stallAfter, and never again once it moves or
// has caught up.
func TestRateMeterStall(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	type reading struct {
		after        time.Duration // since t0
		wal, applied int64
		report       bool
	}
	for _, c := range []struct {
		name     string
		readings []reading
	}{
		{"applying", []reading{{0, 100, 50, false}, {6 * time.Second, 200, 150, false}, {12 * time.Second, 300, 250, false}, {24 * time.Second, 400, 350, false}}},
		{"caught up and idle", []reading{{0, 100, 100, false}, {11 * time.Second, 100, 100, false}, {30 * time.Second, 100, 100, false}}},
		{"stalled, told every stallAfter", []reading{
			{0, 100, 50, false}, {time.Second, 200, 50, false}, {10 * time.Second, 300, 50, false},
			{11 * time.Second, 400, 50, true}, {15 * time.Second, 500, 50, false}, {21 * time.Second, 600, 50, true}}},
		{"moves again", []reading{
			{0, 100, 50, false}, {time.Second, 200, 50, false}, {9 * time.Second, 300, 60, false},
			{18 * time.Second, 400, 60, false}, {20 * time.Second, 500, 60, false}, {28 * time.Second, 600, 60, true}}},
		{"a reading that goes back is no progress", []reading{
			{0, 100, 50, false}, {time.Second, 200, 40, false}, {12 * time.Second, 300, 50, true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rm rateMeter
			for i, r := range c.readings {
				rm.add(rateSample{at: t0.Add(r.after), wal: r.wal, applied: r.applied})
				if _, told := rm.stalled(); told != r.report {
					t.Errorf("reading %d (%v): reported %v, want %v", i, r.after, told, r.report)
				}
			}
		})
	}
}
