package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/rebalance"
)

func TestSummaryPrint(t *testing.T) {
	s := summary{
		before:        []store.ServerRows{{Server: "pg1", Shards: 2, Total: 10}, {Server: "pg2", Shards: 2, Total: 20}},
		after:         []store.ServerRows{{Server: "pg1", Shards: 1, Total: 6}, {Server: "pg2", Shards: 2, Total: 25}, {Server: "pg3", Shards: 1, Total: 7}},
		versionBefore: 1, versionAfter: 4,
		load: loadgen.Result{Elapsed: time.Second, Requests: 50},
		moves: []rebalance.Move{
			{Shard: 0, FencedFor: 12 * time.Millisecond, Cutover: rebalance.CutoverTimes{Attempts: 2, Aborted: 35 * time.Millisecond}},
			{Shard: 3, FencedFor: 30 * time.Millisecond, Cutover: rebalance.CutoverTimes{Attempts: 1, Fence: 2 * time.Millisecond,
				Barrier: 5 * time.Millisecond, Apply: 20 * time.Millisecond, Flip: 3 * time.Millisecond}},
		},
		fenceWaitMax:   7500 * time.Microsecond,
		windowMaxWrite: 40 * time.Millisecond,
	}
	var b strings.Builder
	s.print(&b)
	out := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{
		"shard map version 1 → 4",
		"pg1 10 (2 sh) 6 (1 sh)",
		"pg3 - 7 (1 sh)",
		"total 30 38",
		"shards moved online: 2 (0, 3)",
		// Shard 0's aborted attempt paused writes longer than either window.
		"longest write wait at cutover: 7.5 ms (longest fenced window of a move: 35.0 ms; longest write request during the moves: 40.0 ms)",
		"fenced windows (ms, in shard order, aborted attempts included): 35.0, 30.0; 3 fences for 2 moves",
		"longest window, shard 0: fence 0.0 + barrier 0.0",
		"request errors: 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSummaryMetrics(t *testing.T) {
	s := summary{
		load: loadgen.Result{Elapsed: 2 * time.Second, Requests: 50, Ops: []loadgen.OpStats{
			{Op: loadgen.OpFeed, P99: 18 * time.Millisecond}, {Op: "all", P99: 12 * time.Millisecond},
		}},
		moves: []rebalance.Move{
			{FencedFor: 12 * time.Millisecond, Cutover: rebalance.CutoverTimes{Aborted: 35 * time.Millisecond}},
			{FencedFor: 30 * time.Millisecond},
		},
	}
	got := map[string]float64{}
	for _, m := range s.metrics() {
		got[m.Unit] = m.Value
	}
	for unit, want := range map[string]float64{"req/s": 25, "p99-ms": 12, "feed-p99-ms": 18, "longest-window-ms": 35, "shortest-window-ms": 30, "moves": 2} {
		if got[unit] != want {
			t.Errorf("%s = %v, want %v", unit, got[unit], want)
		}
	}
}

// TestSoakCheck: a soak fails on a backend past the limit and on one that
// kept growing, as the soak that kept the row counter's backend in its pool
// did (17.3 MB after the warm-up, 53.1 MB at the end).
func TestSoakCheck(t *testing.T) {
	mb := func(m float64) backends { return backends{count: 1, maxMB: m, maxServer: "pg1"} }
	for _, tc := range []struct {
		name      string
		warm, end backends
		fails     bool
	}{
		{"flat", mb(15.4), mb(17.8), false},
		{"grew", mb(17.3), mb(53.1), true},
		{"past the limit", mb(60), mb(65), true},
	} {
		s := summary{warmBackends: tc.warm, endBackends: tc.end}
		if err := s.check(true); (err != nil) != tc.fails {
			t.Errorf("%s: check = %v, want failing %v", tc.name, err, tc.fails)
		}
		if err := s.check(false); err != nil {
			t.Errorf("%s: not a soak: check = %v", tc.name, err)
		}
	}
}
