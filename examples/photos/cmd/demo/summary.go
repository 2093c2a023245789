package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/examples/photos/store"
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

	var longest time.Duration
	var shards []string
	for _, m := range s.moves {
		longest = max(longest, m.FencedFor)
		shards = append(shards, fmt.Sprintf("%d", m.Shard))
	}
	fmt.Fprintf(w, "\nshards moved online: %d (%s)\n", len(s.moves), strings.Join(shards, ", "))
	fmt.Fprintf(w, "longest write wait at cutover: %s (longest fenced window of a move: %s; longest write request during the moves: %s)\n",
		ms(s.fenceWaitMax), ms(longest), ms(s.windowMaxWrite))
	fmt.Fprintf(w, "\nload: ")
	s.load.Print(w)
	fmt.Fprintf(w, "\nrequest errors: %d\n", s.load.Errors)
	fmt.Fprintf(w, "demo took %s\n", s.elapsed.Round(100*time.Millisecond))
}

func cell(r store.ServerRows) string {
	if r.Server == "" {
		return "-"
	}
	return fmt.Sprintf("%d (%d sh)", r.Total, r.Shards)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
