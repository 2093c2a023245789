// Package benchout writes the figures that tests and programs take without
// being benchmarks (a move of a million rows, the fence lease, the demo)
// as lines of Go's benchmark format, so that make figures reads them as it
// reads benchmarks' output:
//
//	BenchmarkMoveFigures-2   1   7.5 fenced-ms   0 failed-writes
//
// The lines go to the file that $SHARDKIT_FIGURES_OUT names (make figures
// sets it for each figure's command); without it, Write does nothing.
package benchout

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Env names the environment variable that names the file Write appends to.
const Env = "SHARDKIT_FIGURES_OUT"

// A Metric is one figure and its unit, as testing.B.ReportMetric takes
// them. A unit has no spaces.
type Metric struct {
	Value float64
	Unit  string
}

// Enabled reports whether Write writes anywhere.
func Enabled() bool { return os.Getenv(Env) != "" }

// Write appends one result line named Benchmark+name, with the metrics, to
// the file $SHARDKIT_FIGURES_OUT names, and before the file's first line
// the configuration lines go test -bench prints (goos, goarch, cpu).
func Write(name string, metrics ...Metric) error {
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Benchmark%s-%d\t1", name, runtime.GOMAXPROCS(0))
	for _, m := range metrics {
		if m.Unit == "" || strings.ContainsAny(m.Unit, " \t\n") {
			return fmt.Errorf("benchout: unit %q: want one word", m.Unit)
		}
		fmt.Fprintf(&b, "\t%g %s", m.Value, m.Unit)
	}
	b.WriteString("\n")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("benchout: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintf(f, "goos: %s\ngoarch: %s\n", runtime.GOOS, runtime.GOARCH)
		if cpu := cpuName(); cpu != "" {
			fmt.Fprintf(f, "cpu: %s\n", cpu)
		}
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fmt.Errorf("benchout: %w", err)
	}
	return f.Close()
}

// cpuName is the processor's model name, as go test -bench prints it on
// Linux; "" elsewhere.
func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
