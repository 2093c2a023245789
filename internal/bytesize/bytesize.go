// Package bytesize writes byte counts for people, in binary units: what a
// move's errors and progress bars say of replication rates and lag.
package bytesize

import "fmt"

// Format writes b bytes as "512 B", "1.5 KiB", "10.5 MiB", … up to PiB.
func Format(b float64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	exp, div := 0, float64(unit)
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", b/div, "KMGTP"[exp])
}
