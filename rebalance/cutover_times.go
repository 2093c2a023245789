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
	Queue   time.Duration // waiting for another cutover, copy or index build of the same Mover to finish
	Gate    time.Duration // lag gate: until the replica confirmed a fresh position fast enough
	Fence   time.Duration // shard map fenced, journal updated (one catalog statement)
	Barrier time.Duration // write barrier, final LSN and sequences on the serving side (one statement sent with the fence, then its commit): the time it took beyond the fence's
	Apply   time.Duration // until the replica confirmed the final LSN
	Carry   time.Duration // sequences carried, replica LSN, newest ID and clock read (one statement)
	Clock   time.Duration // until the replica's clock passed the newest ID's millisecond
	Seal    time.Duration // barrier sealed while its fence lease held (one statement)
	Flip    time.Duration // shard map flipped, journal updated (one catalog statement)

	// Attempts counts fences: an attempt whose barrier could not get its
	// locks within Config.BarrierWait was unfenced and tried again.
	// Aborted is the longest write pause of such an attempt (fence to
	// unfence), 0 when the first attempt went through.
	Attempts int
	Aborted  time.Duration
}

// Fenced is the sum of the steps inside the fenced window.
func (c CutoverTimes) Fenced() time.Duration {
	return c.Fence + c.Barrier + c.Apply + c.Carry + c.Clock + c.Seal + c.Flip
}

// IsZero reports whether nothing was measured (no cutover yet).
func (c CutoverTimes) IsZero() bool { return c == CutoverTimes{} }

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
	if c.IsZero() {
		return "-"
	}
	var b strings.Builder
	for i, p := range c.fencedParts() {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%s %s", p.Name, fmtMs(p.D))
	}
	fmt.Fprintf(&b, " ms (before the fence: queue %s, lag gate %s ms)", fmtMs(c.Queue), fmtMs(c.Gate))
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
	Fence    float64 `json:"fence_ms"`
	Barrier  float64 `json:"barrier_ms"`
	Apply    float64 `json:"apply_ms"`
	Carry    float64 `json:"carry_ms"`
	Clock    float64 `json:"clock_ms"`
	Seal     float64 `json:"seal_ms,omitempty"`
	Flip     float64 `json:"flip_ms"`
	Attempts int     `json:"attempts,omitempty"`
	Aborted  float64 `json:"aborted_ms,omitempty"`
}

// MarshalJSON writes the durations as milliseconds (queue_ms, gate_ms,
// fence_ms, barrier_ms, apply_ms, carry_ms, clock_ms, seal_ms, flip_ms, aborted_ms)
// and the attempts.
func (c CutoverTimes) MarshalJSON() ([]byte, error) {
	return json.Marshal(cutoverJSON{millis(c.Queue), millis(c.Gate), millis(c.Fence), millis(c.Barrier), millis(c.Apply),
		millis(c.Carry), millis(c.Clock), millis(c.Seal), millis(c.Flip), c.Attempts, millis(c.Aborted)})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *CutoverTimes) UnmarshalJSON(b []byte) error {
	var j cutoverJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = CutoverTimes{fromMs(j.Queue), fromMs(j.Gate), fromMs(j.Fence), fromMs(j.Barrier), fromMs(j.Apply),
		fromMs(j.Carry), fromMs(j.Clock), fromMs(j.Seal), fromMs(j.Flip), j.Attempts, fromMs(j.Aborted)}
	return nil
}
