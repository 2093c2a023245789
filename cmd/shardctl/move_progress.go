package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/schollz/progressbar/v3"

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
		desc := fmt.Sprintf("shard %d: copy", ev.Shard)
		if ev.Phase == "catchup" {
			desc = fmt.Sprintf("shard %d: catch-up", ev.Shard)
		}
		bar = progressbar.NewOptions64(max(ev.Total, 1),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(desc),
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
	if ev.Phase == "copy" && ev.Rows > 0 {
		bar.Describe(fmt.Sprintf("shard %d: copy (~%d rows)", ev.Shard, ev.Rows))
	}
	_ = bar.Set64(ev.Done)
}
