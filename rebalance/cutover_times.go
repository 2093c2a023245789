package rebalance

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// CutoverTimes is where the time of a move's last cutover went, step by
// step. Queue and Gate come before the fence (writes flow); the rest is the
// fenced window, whose total is Move.FencedFor.
type CutoverTimes struct {
	Queue time.Duration // waiting for another cutover, copy or index build of the same Mover to finish
	Gate  time.Duration // lag gate: until the replica confirmed a fresh position fast enough
	// Precarry is the carry of the sequences (twice Config.SequenceMargin
	// ahead) and the clock reading, before the fence.
	Precarry time.Duration
	Fence    time.Duration // shard map fenced, journal updated (one catalog statement)
	Barrier  time.Duration // write barrier, final LSN and sequences on the serving side (one statement sent with the fence: the time it took beyond the fence's), then its commit (sent with the apply wait: that round trip less the wait)
	Apply    time.Duration // until the replica confirmed the final LSN (waited for on the serving side, right after the barrier's commit, by its clock)
	Carry    time.Duration // until the sequences' carry was done: 0 unless CarriedInWindow (one statement to the replica, sent with the barrier, awaited before its commit)
	Clock    time.Duration // until the replica's clock passed the newest ID's millisecond
	Seal     time.Duration // barrier sealed while its fence lease held (one statement)
	Flip     time.Duration // shard map flipped, journal updated (one catalog statement)

	// Attempts counts fences: an attempt whose barrier could not get its
	// locks within Config.BarrierWait was unfenced and tried again.
	// Aborted is the longest write pause of such an attempt (fence to
	// unfence), 0 when the first attempt went through.
	Attempts int
	Aborted  time.Duration
	// CarriedInWindow is set when the shard drew more than
	// Config.SequenceMargin from a sequence between the carry before the
	// fence and the barrier (or that carry failed): the window carried
	// the sequences again.
	CarriedInWindow bool
}

// fenced is the sum of the steps inside the fenced window.
func (c CutoverTimes) fenced() time.Duration {
	return c.Fence + c.Barrier + c.Apply + c.Carry + c.Clock + c.Seal + c.Flip
}

// isZero reports whether nothing was measured (no cutover yet).
func (c CutoverTimes) isZero() bool { return c == CutoverTimes{} }

// fencedParts are the steps of the fenced window, in order.
func (c CutoverTimes) fencedParts() []struct {
	Name string
	D    time.Duration
} {
	return []struct {
		Name string
		D    time.Duration
	}{
		{"fence", c.Fence}, {"barrier", c.Barrier}, {"apply", c.Apply},
		{"carry", c.Carry}, {"clock", c.Clock}, {"seal", c.Seal}, {"flip", c.Flip},
	}
}

// String is the breakdown in one line: the fenced steps, then what came
// before the fence, in milliseconds.
func (c CutoverTimes) String() string {
	if c.isZero() {
		return "-"
	}
	var b strings.Builder
	for i, p := range c.fencedParts() {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%s %s", p.Name, fmtMs(p.D))
	}
	fmt.Fprintf(&b, " ms (before the fence: queue %s, lag gate %s, sequences %s ms)", fmtMs(c.Queue), fmtMs(c.Gate), fmtMs(c.Precarry))
	if c.CarriedInWindow {
		b.WriteString("; sequences carried again in the window")
	}
	if c.Attempts > 1 {
		fmt.Fprintf(&b, "; %d attempts, the longest aborted one paused writes %s ms", c.Attempts, fmtMs(c.Aborted))
	}
	return b.String()
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.1f", millis(d)) }

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMs(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// cutoverJSON is CutoverTimes as stored in the journal (shardkit.moves.cutover).
type cutoverJSON struct {
	Queue    float64 `json:"queue_ms"`
	Gate     float64 `json:"gate_ms"`
	Precarry float64 `json:"precarry_ms,omitempty"`
	Fence    float64 `json:"fence_ms"`
	Barrier  float64 `json:"barrier_ms"`
	Apply    float64 `json:"apply_ms"`
	Carry    float64 `json:"carry_ms"`
	Clock    float64 `json:"clock_ms"`
	Seal     float64 `json:"seal_ms,omitempty"`
	Flip     float64 `json:"flip_ms"`
	Attempts int     `json:"attempts,omitempty"`
	Aborted  float64 `json:"aborted_ms,omitempty"`
	InWindow bool    `json:"carried_in_window,omitempty"`
}

// MarshalJSON writes the durations as milliseconds (queue_ms, gate_ms,
// precarry_ms, fence_ms, barrier_ms, apply_ms, carry_ms, clock_ms, seal_ms,
// flip_ms, aborted_ms), the attempts and carried_in_window.
func (c CutoverTimes) MarshalJSON() ([]byte, error) {
	return json.Marshal(cutoverJSON{millis(c.Queue), millis(c.Gate), millis(c.Precarry), millis(c.Fence), millis(c.Barrier), millis(c.Apply),
		millis(c.Carry), millis(c.Clock), millis(c.Seal), millis(c.Flip), c.Attempts, millis(c.Aborted), c.CarriedInWindow})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *CutoverTimes) UnmarshalJSON(b []byte) error {
	var j cutoverJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = CutoverTimes{Queue: fromMs(j.Queue), Gate: fromMs(j.Gate), Precarry: fromMs(j.Precarry), Fence: fromMs(j.Fence),
		Barrier: fromMs(j.Barrier), Apply: fromMs(j.Apply), Carry: fromMs(j.Carry), Clock: fromMs(j.Clock), Seal: fromMs(j.Seal),
		Flip: fromMs(j.Flip), Attempts: j.Attempts, Aborted: fromMs(j.Aborted), CarriedInWindow: j.InWindow}
	return nil
}
