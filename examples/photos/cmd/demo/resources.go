package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// resources is what the demo process holds at one moment: it runs the
// photo service, the load generator and the mover, so a leak in any of
// them shows here.
type resources struct {
	at         time.Duration // since the demo started
	goroutines int
	rssMB      float64 // resident set size; 0 where /proc is not available
	heapMB     float64 // live heap after a collection
}

func readResources(start time.Time) resources {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := resources{at: time.Since(start), goroutines: runtime.NumGoroutine(), heapMB: float64(ms.HeapAlloc) / (1 << 20)}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				r.rssMB = float64(pages*int64(os.Getpagesize())) / (1 << 20)
			}
		}
	}
	return r
}

func (r resources) String() string {
	return fmt.Sprintf("%d goroutines, RSS %.0f MB, heap %.1f MB", r.goroutines, r.rssMB, r.heapMB)
}

// settle waits, up to d, for the process's goroutines to fall back to at
// most limit (the load's connections close as their idle timeouts pass),
// and returns the resources at the end of the wait.
func settle(ctx context.Context, start time.Time, limit int, d time.Duration) resources {
	deadline := time.Now().Add(d)
	for {
		r := readResources(start)
		if r.goroutines <= limit || time.Now().After(deadline) || ctx.Err() != nil {
			return r
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// leaked reports a growth the soak refuses: goroutines that did not
// return to the idle count they started from (give or take the pools of a
// server added on the way), or a live heap after the load more than half
// again what it was at the end of the warm-up, when the pools and the
// statement description caches were full and the load had reached its
// steady state.
func leaked(idle, warm, end resources) error {
	if end.goroutines > idle.goroutines+goroutineSlack {
		return fmt.Errorf("goroutines grew from %d at idle to %d after the load (more than %d): a leak", idle.goroutines, end.goroutines, goroutineSlack)
	}
	if end.heapMB > 1.5*warm.heapMB+8 {
		return fmt.Errorf("live heap grew from %.1f MB after the warm-up to %.1f MB after the load: a leak", warm.heapMB, end.heapMB)
	}
	return nil
}

// writeHeapProfile writes the live heap's profile (after a collection).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// goroutineSlack covers the background goroutines of connection pools
// opened on the way (the new server's, the mover's).
const goroutineSlack = 40
