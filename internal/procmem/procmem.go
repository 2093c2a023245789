// Package procmem reads a process's private memory from Linux's /proc: what
// the memory figures of the demo, the scale harness and the benchmarks
// report for Postgres backends and app processes.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// RssAnonMB returns a process's private resident memory in MB (RssAnon in
// /proc/PID/status: its own heap and caches, shared memory such as
// Postgres's shared buffers not included); ok is false when the process is
// gone or the line cannot be read (not Linux).
func RssAnonMB(pid int) (mb float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	return parseRssAnon(string(b))
}

// parseRssAnon reads the RssAnon line of a /proc/PID/status text.
func parseRssAnon(status string) (float64, bool) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}
