package loadgen

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// OpStats are the figures of one kind of request.
type OpStats struct {
	Op       string
	Requests int
	Errors   int
	P50      time.Duration
	P95      time.Duration
	P99      time.Duration
	Max      time.Duration
}

// stats collects request latencies and errors, by operation.
type stats struct {
	mu        sync.Mutex
	lat       map[string][]time.Duration
	errs      map[string]int
	firstErrs []string
	total     int
	errTotal  int
	// writeMax is the longest write in a window marked by the caller (the
	// demo marks the shard move).
	windowOn bool
	windowMx time.Duration
}

func newStats() *stats {
	return &stats{lat: map[string][]time.Duration{}, errs: map[string]int{}}
}

// writes are the operations that change rows.
var writes = map[string]bool{OpCreateUser: true, OpUpload: true, OpLike: true, OpFollow: true}

func (s *stats) record(op string, d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	s.lat[op] = append(s.lat[op], d)
	if err != nil {
		s.errTotal++
		s.errs[op]++
		if len(s.firstErrs) < 10 {
			s.firstErrs = append(s.firstErrs, fmt.Sprintf("%s: %v", op, err))
		}
	}
	if s.windowOn && writes[op] && d > s.windowMx {
		s.windowMx = d
	}
}

func (s *stats) counts() (total, errs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.errTotal
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func (s *stats) ops() []OpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []OpStats
	all := []time.Duration{}
	for op, l := range s.lat {
		sorted := slices.Clone(l)
		slices.Sort(sorted)
		all = append(all, sorted...)
		out = append(out, OpStats{Op: op, Requests: len(l), Errors: s.errs[op],
			P50: percentile(sorted, .50), P95: percentile(sorted, .95), P99: percentile(sorted, .99), Max: sorted[len(sorted)-1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	if len(all) > 0 {
		slices.Sort(all)
		out = append(out, OpStats{Op: "all", Requests: len(all), Errors: s.errTotal,
			P50: percentile(all, .50), P95: percentile(all, .95), P99: percentile(all, .99), Max: all[len(all)-1]})
	}
	return out
}

// Result is what a run measured.
type Result struct {
	Elapsed     time.Duration
	Requests    int
	Errors      int
	Ops         []OpStats // per operation, then "all"
	FirstErrors []string  // up to ten error messages, for diagnosis
	Users       int
	Photos      int
}

// Throughput is requests per second over the run.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Print writes the result as a table.
func (r Result) Print(w io.Writer) {
	fmt.Fprintf(w, "%d requests in %s: %.0f req/s, %d errors (%d users, %d photos made)\n",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.Throughput(), r.Errors, r.Users, r.Photos)
	fmt.Fprintf(w, "  %-12s %9s %7s %9s %9s %9s %9s\n", "operation", "requests", "errors", "p50", "p95", "p99", "max")
	for _, o := range r.Ops {
		fmt.Fprintf(w, "  %-12s %9d %7d %9s %9s %9s %9s\n", o.Op, o.Requests, o.Errors,
			ms(o.P50), ms(o.P95), ms(o.P99), ms(o.Max))
	}
	if len(r.FirstErrors) > 0 {
		fmt.Fprintf(w, "  first errors:\n    %s\n", strings.Join(r.FirstErrors, "\n    "))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
