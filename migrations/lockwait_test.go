package migrations

import (
	"testing"
	"time"
)

// TestBackoff: the pause doubles from the base up to the ceiling and is
// drawn from the upper half of that, so that retries spread out.
func TestBackoff(t *testing.T) {
	base, ceiling := 200*time.Millisecond, 5*time.Second
	tests := []struct {
		attempt int
		top     time.Duration
	}{{1, 200 * time.Millisecond}, {2, 400 * time.Millisecond}, {4, 1600 * time.Millisecond}, {5, 3200 * time.Millisecond}, {6, 5 * time.Second}, {40, 5 * time.Second}}
	for _, tt := range tests {
		seen := map[time.Duration]bool{}
		for range 100 {
			d := backoff(tt.attempt, base, ceiling)
			if d < tt.top/2 || d > tt.top {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", tt.attempt, d, tt.top/2, tt.top)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("backoff(%d): %d distinct pauses in 100, want jitter", tt.attempt, len(seen))
		}
	}
}
