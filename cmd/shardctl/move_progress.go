package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/schollz/progressbar/v3"

	"github.com/shardkit/shardkit/internal/bytesize"
	"github.com/shardkit/shardkit/rebalance"
)

// moveBars draws one bar per (move, phase): bytes copied, then catch-up lag.
type moveBars struct {
	w    io.Writer
	mu   sync.Mutex
	bars map[string]*progressbar.ProgressBar
}

func newMoveBars(w io.Writer) *moveBars {
	return &moveBars{w: w, bars: map[string]*progressbar.ProgressBar{}}
}

func (p *moveBars) report(ev rebalance.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := fmt.Sprintf("%d/%s", ev.MoveID, ev.Phase)
	bar, ok := p.bars[key]
	if !ok {
		bar = progressbar.NewOptions64(max(ev.Total, 1),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(phaseName(ev)),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100_000_000),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
		p.bars[key] = bar
	}
	if ev.Total > 0 && bar.GetMax64() != ev.Total {
		bar.ChangeMax64(ev.Total)
	}
	switch {
	case ev.Phase == "copy" && ev.Rows > 0:
		bar.Describe(fmt.Sprintf("%s (~%d rows)", phaseName(ev), ev.Rows))
	case ev.WriteRate > 0 || ev.ApplyRate > 0:
		// A target falling behind shows why the move waits: the source's
		// write rate against the rate the target applies.
		bar.Describe(fmt.Sprintf("%s (written %s/s, applied %s/s)", phaseName(ev), bytesize.Format(ev.WriteRate), bytesize.Format(ev.ApplyRate)))
	}
	_ = bar.Set64(ev.Done)
}

// phaseName is the bar's title for a phase of a shard's move.
func phaseName(ev rebalance.Progress) string {
	switch ev.Phase {
	case "catchup":
		return fmt.Sprintf("shard %d: catch-up", ev.Shard)
	case "gate":
		return fmt.Sprintf("shard %d: lag gate", ev.Shard)
	default:
		return fmt.Sprintf("shard %d: %s", ev.Shard, ev.Phase)
	}
}
