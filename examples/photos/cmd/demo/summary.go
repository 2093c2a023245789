package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/rebalance"
)

// summary is what the demo prints at the end.
type summary struct {
	before, after               []store.ServerRows
	versionBefore, versionAfter int64
	load                        loadgen.Result
	moves                       []rebalance.Move
	windowMaxWrite              time.Duration // longest write request while moves ran (client side)
	fenceWaitMax                time.Duration // longest wait of a write on a fenced shard (plugin)
	elapsed                     time.Duration
	idle, warm, end             resources // the process before the load, after the warm-up, and after the load
	warmBackends, endBackends   backends  // the servers' backends after the warm-up and at the end of the load
}

// check fails a run whose requests failed, and a soak whose process or
// server backends grew past their bounds.
func (s summary) check(soak bool) error {
	if s.load.Errors > 0 {
		return fmt.Errorf("%d requests failed", s.load.Errors)
	}
	if !soak {
		return nil
	}
	if err := leaked(s.idle, s.warm, s.end); err != nil {
		return err
	}
	if s.endBackends.maxMB > backendLimitMB {
		return fmt.Errorf("a server backend holds %.1f MB of private memory at the end of the load (more than %d MB)", s.endBackends.maxMB, backendLimitMB)
	}
	// Flat: a backend's caches fill as it touches more shard tables and
	// prepares more reads, then stop at their bounds. The same allowance as
	// the live heap's.
	if s.endBackends.maxMB > 1.5*s.warmBackends.maxMB+8 {
		return fmt.Errorf("the servers' largest backend grew from %.1f MB after the warm-up to %.1f MB at the end of the load (%s): not flat",
			s.warmBackends.maxMB, s.endBackends.maxMB, s.endBackends)
	}
	return nil
}

func (s summary) print(w io.Writer) {
	fmt.Fprintf(w, "\n==================== summary ====================\n")
	fmt.Fprintf(w, "rows per server (shard map version %d → %d)\n", s.versionBefore, s.versionAfter)
	fmt.Fprintf(w, "  %-10s %14s %14s\n", "server", "before", "after")
	byName := map[string][2]store.ServerRows{}
	var names []string
	for _, r := range s.before {
		v := byName[r.Server]
		v[0] = r
		byName[r.Server] = v
		names = append(names, r.Server)
	}
	for _, r := range s.after {
		v, ok := byName[r.Server]
		v[1] = r
		byName[r.Server] = v
		if !ok {
			names = append(names, r.Server)
		}
	}
	var tb, ta int64
	for _, n := range names {
		v := byName[n]
		fmt.Fprintf(w, "  %-10s %14s %14s\n", n, cell(v[0]), cell(v[1]))
		tb += v[0].Total
		ta += v[1].Total
	}
	fmt.Fprintf(w, "  %-10s %14d %14d\n", "total", tb, ta)

	// A move's longest write pause is its fenced window, or an attempt
	// that was unfenced because running writes held the barrier too long.
	var longest rebalance.Move
	var longestPause time.Duration
	var shards, windows []string
	attempts := 0
	for _, m := range s.moves {
		pause := max(m.FencedFor, m.Cutover.Aborted)
		if pause > longestPause {
			longest, longestPause = m, pause
		}
		attempts += max(m.Cutover.Attempts, 1)
		shards = append(shards, fmt.Sprintf("%d", m.Shard))
		windows = append(windows, fmt.Sprintf("%.1f", float64(pause)/float64(time.Millisecond)))
	}
	fmt.Fprintf(w, "\nshards moved online: %d (%s)\n", len(s.moves), strings.Join(shards, ", "))
	fmt.Fprintf(w, "longest write wait at cutover: %s (longest fenced window of a move: %s; longest write request during the moves: %s)\n",
		ms(s.fenceWaitMax), ms(longestPause), ms(s.windowMaxWrite))
	if len(s.moves) > 0 {
		fmt.Fprintf(w, "fenced windows (ms, in shard order, aborted attempts included): %s; %d fences for %d moves\n",
			strings.Join(windows, ", "), attempts, len(s.moves))
		fmt.Fprintf(w, "longest window, shard %d: %s\n", longest.Shard, longest.Cutover)
	}
	fmt.Fprintf(w, "\nload: ")
	s.load.Print(w)
	fmt.Fprintf(w, "\nmemory: the service's live heap %.1f MB after the warm-up, %.1f MB after the load (%.2f×); %s at the end of the load\n",
		s.warm.heapMB, s.end.heapMB, s.end.heapMB/s.warm.heapMB, s.endBackends)
	fmt.Fprintf(w, "\nrequest errors: %d\n", s.load.Errors)
	fmt.Fprintf(w, "demo took %s\n", s.elapsed.Round(100*time.Millisecond))
}

// metrics are the summary's figures as docs/performance.md's demo table
// shows them, for make figures (written through internal/harness/benchout).
func (s summary) metrics() []benchout.Metric {
	var longest, shortest time.Duration
	for i, m := range s.moves {
		pause := max(m.FencedFor, m.Cutover.Aborted)
		longest = max(longest, pause)
		if i == 0 || pause < shortest {
			shortest = pause
		}
	}
	var p99, feedP99 time.Duration
	for _, o := range s.load.Ops {
		switch o.Op {
		case "all":
			p99 = o.P99
		case loadgen.OpFeed:
			feedP99 = o.P99
		}
	}
	millis := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return []benchout.Metric{
		{Value: float64(s.load.Requests), Unit: "requests"},
		{Value: s.load.Throughput(), Unit: "req/s"},
		{Value: millis(p99), Unit: "p99-ms"},
		{Value: millis(feedP99), Unit: "feed-p99-ms"},
		{Value: float64(len(s.moves)), Unit: "moves"},
		{Value: millis(longest), Unit: "longest-window-ms"},
		{Value: millis(shortest), Unit: "shortest-window-ms"},
		{Value: millis(s.fenceWaitMax), Unit: "write-wait-ms"},
		{Value: millis(s.windowMaxWrite), Unit: "longest-write-ms"},
		{Value: float64(s.load.Errors), Unit: "errors"},
		{Value: s.elapsed.Seconds(), Unit: "took-s"},
		{Value: s.warm.heapMB, Unit: "heap-warm-MB"},
		{Value: s.end.heapMB, Unit: "heap-end-MB"},
		{Value: s.end.heapMB / s.warm.heapMB, Unit: "heap-end/warm"},
		{Value: float64(s.endBackends.count), Unit: "backends"},
		{Value: s.endBackends.maxMB, Unit: "backend-max-MB"},
	}
}

func cell(r store.ServerRows) string {
	if r.Server == "" {
		return "-"
	}
	return fmt.Sprintf("%d (%d sh)", r.Total, r.Shards)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
