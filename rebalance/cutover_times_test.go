package rebalance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCutoverTimes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ct     CutoverTimes
		fenced time.Duration
		text   []string
	}{
		{name: "zero", text: []string{"-"}},
		{
			name: "every step",
			ct: CutoverTimes{Queue: 3 * time.Millisecond, Gate: 250 * time.Millisecond, Fence: 2500 * time.Microsecond,
				Barrier: 7 * time.Millisecond, Apply: 11 * time.Millisecond, Carry: 1 * time.Millisecond,
				Clock: 0, Seal: 2 * time.Millisecond, Flip: 3 * time.Millisecond},
			fenced: 26500 * time.Microsecond,
			text: []string{"fence 2.5 + barrier 7.0 + apply 11.0 + carry 1.0 + clock 0.0 + seal 2.0 + flip 3.0 ms",
				"queue 3.0, lag gate 250.0, sequences 0.0 ms"},
		},
		{
			name: "sequences carried again in the window",
			ct: CutoverTimes{Gate: 5 * time.Millisecond, Precarry: 1500 * time.Microsecond, Fence: 2 * time.Millisecond,
				Apply: 4 * time.Millisecond, Carry: 6 * time.Millisecond, Flip: 1 * time.Millisecond, Attempts: 1, CarriedInWindow: true},
			fenced: 13 * time.Millisecond,
			text:   []string{"carry 6.0", "sequences 1.5 ms", "sequences carried again in the window"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ct.fenced(); got != tc.fenced {
				t.Errorf("Fenced() = %v, want %v", got, tc.fenced)
			}
			s := tc.ct.String()
			for _, want := range tc.text {
				if !strings.Contains(s, want) {
					t.Errorf("String() = %q, lacks %q", s, want)
				}
			}
			b, err := json.Marshal(tc.ct)
			if err != nil {
				t.Fatal(err)
			}
			var back CutoverTimes
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			// Milliseconds as float64 keep microseconds exactly at these sizes.
			if back != tc.ct {
				t.Errorf("JSON round trip %s: got %+v, want %+v", b, back, tc.ct)
			}
		})
	}
	var ct CutoverTimes
	if err := json.Unmarshal([]byte(`{"fence_ms": "x"}`), &ct); err == nil {
		t.Error("a non-number duration was accepted")
	}
}
