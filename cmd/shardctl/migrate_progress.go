package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/shardkit/shardkit/migrations"
)

// migrateBar draws a migration's progress with its ETA, and writes a line
// for each lock timeout, naming the schema and the blocker, even when quiet.
type migrateBar struct {
	w     io.Writer
	quiet bool
	bar   *progressbar.ProgressBar
}

func newMigrateBar(w io.Writer, quiet bool) *migrateBar {
	return &migrateBar{w: w, quiet: quiet}
}

func (p *migrateBar) update(r migrations.Progress) {
	if r.Wait != nil {
		if p.bar != nil {
			_ = p.bar.Clear()
		}
		fmt.Fprintln(p.w, waitLine(*r.Wait))
	}
	if p.quiet {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(r.Total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("migrating shard schemas"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("schemas"),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(100_000_000), // 100 ms
			progressbar.OptionClearOnFinish())
	}
	desc := "migrating shard schemas"
	if r.ETA > 0 {
		desc += fmt.Sprintf(" (ETA %s)", r.ETA.Round(time.Second))
	}
	if r.Retries > 0 {
		desc += fmt.Sprintf(" [%d lock timeouts]", r.Retries)
	}
	p.bar.Describe(desc)
	_ = p.bar.Set(r.Done)
}

// waitLine describes one lock timeout.
func waitLine(w migrations.LockWait) string {
	s := fmt.Sprintf("lock timeout %d on %s (server %s, %s) after %s in all: ", w.Attempts, w.Schema, w.Server, w.File, w.Waited.Round(time.Millisecond))
	if len(w.Blockers) == 0 {
		return s + "the blocker ended before it could be named; retrying later"
	}
	s += "blocked by " + w.Blockers[0].String()
	if n := len(w.Blockers) - 1; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s + "; retrying later"
}

func (p *migrateBar) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
