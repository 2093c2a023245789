package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/rebalance"
)

func init() {
	statusSections = append(statusSections, statusSection{Key: "moves", Collect: collectMoves, Text: printMoves})
}

// moveStatus is one unfinished move as `shardctl status` shows it.
type moveStatus struct {
	ID       int64   `json:"id"`
	Shard    int     `json:"shard"`
	Source   string  `json:"source"`
	Target   string  `json:"target"`
	Mode     string  `json:"mode"`
	State    string  `json:"state"`
	Step     string  `json:"step"`
	Doing    string  `json:"doing,omitempty"`
	Error    string  `json:"error,omitempty"`
	FencedMs float64 `json:"fenced_ms,omitempty"`
	// Cutover is where the fenced window went, step by step.
	Cutover *rebalance.CutoverTimes `json:"cutover,omitempty"`
	Updated string                  `json:"updated"`
	// FenceLeftMs is, for a shard fenced by this move's cutover, the time
	// until its lease lapses on the catalog's clock (negative: lapsed).
	FenceLeftMs *float64 `json:"fence_lease_left_ms,omitempty"`
	FencedOn    string   `json:"fenced_on,omitempty"`
}

func collectMoves(ctx context.Context, cat *catalog.Catalog) (any, error) {
	ms, err := rebalance.ActiveMoves(ctx, cat)
	if err != nil {
		return nil, err
	}
	fences, err := rebalance.Fences(ctx, cat)
	if err != nil {
		return nil, err
	}
	fenced := map[int]rebalance.Fence{}
	for _, f := range fences {
		fenced[f.Shard] = f
	}
	out := make([]moveStatus, 0, len(ms))
	for _, m := range ms {
		var ct *rebalance.CutoverTimes
		if m.Cutover != (rebalance.CutoverTimes{}) {
			ct = &m.Cutover
		}
		out = append(out, moveStatus{Cutover: ct, ID: m.ID, Shard: m.Shard, Source: m.Source, Target: m.Target, Mode: modeName(m.Offline),
			State: string(m.State), Step: string(m.Step), Doing: string(m.Doing), Error: m.Error,
			FencedMs: float64(m.FencedFor) / float64(time.Millisecond), Updated: m.Updated.UTC().Format(time.RFC3339)})
		if f, ok := fenced[m.Shard]; ok {
			left := float64(f.Left) / float64(time.Millisecond)
			out[len(out)-1].FenceLeftMs, out[len(out)-1].FencedOn = &left, f.Server
		}
	}
	return out, nil
}

func printMoves(w io.Writer, v any) {
	ms, _ := v.([]moveStatus)
	if len(ms) == 0 {
		fmt.Fprintln(w, "moves: none unfinished")
		return
	}
	fmt.Fprintln(w, "moves (unfinished: resume with `shardctl move --resume`, finish with --complete, undo with `shardctl rollback`):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tSHARD\tFROM\tTO\tSTATE\tSTEP\tERROR")
	for _, m := range ms {
		step := m.Step
		if m.Doing != "" {
			step += " → " + m.Doing
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Shard, m.Source, m.Target, m.State, step, m.Error)
	}
	_ = tw.Flush()
	for _, m := range ms {
		switch {
		case m.FenceLeftMs == nil:
		case *m.FenceLeftMs >= 0:
			fmt.Fprintf(w, "  move %d: shard %d fenced on %s, lease lapses in %.1f s\n", m.ID, m.Shard, m.FencedOn, *m.FenceLeftMs/1000)
		default:
			fmt.Fprintf(w, "  move %d: shard %d fenced on %s, lease lapsed %.1f s ago: `shardctl watch-fences` ends it\n",
				m.ID, m.Shard, m.FencedOn, -*m.FenceLeftMs/1000)
		}
		if m.Cutover != nil {
			fmt.Fprintf(w, "  move %d fenced %.1f ms: %s\n", m.ID, m.FencedMs, m.Cutover)
		}
	}
}
