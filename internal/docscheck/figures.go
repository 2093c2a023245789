package docscheck

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A Figure is one table of docs/performance.md that make figures maintains:
// the command that measures it, and how its rows are read from the
// command's output, which is Go's benchmark format (`go test -bench`),
// stable across Go releases.
type Figure struct {
	Name    string   // the page's marker: <!-- figures:Name -->
	Command string   // run from the module's root; its output is the result file
	Columns []string // column titles; the first is the rows' labels
	Rows    []Row
}

// A Row is one line of a figure's table.
type Row struct {
	Label string
	// Bench is the benchmark's name without its -GOMAXPROCS suffix.
	Bench string
	// Units names, per column after the label, the unit whose values fill
	// the cell ("ns/op", "allocs/op", a unit the benchmark reports with
	// ReportMetric); "ms/ns/op" is the number per millisecond that ns/op
	// makes (1e6 / ns/op).
	Units []string
}

// Figures are the tables make figures maintains. A figure whose result
// file does not exist yet keeps the page's text as it is.
var Figures = []Figure{
	{
		Name:    "ids",
		Command: "go test ./idgen ./router -run '^$' -bench . -benchmem -count 3",
		Columns: []string{"operation", "ns/op", "allocs/op"},
		Rows: []Row{
			{"`Generator.Next`, random shards, 1 goroutine", "BenchmarkNext", []string{"ns/op", "allocs/op"}},
			{"`Generator.Next`, random shards, all cores", "BenchmarkNextParallel", []string{"ns/op", "allocs/op"}},
			{"`Generator.Fill` of 100 IDs, per ID", "BenchmarkFill/100", []string{"ns/id", "allocs/op"}},
			{"reading the clock alone (the floor under Next)", "BenchmarkClockRead", []string{"ns/op", "allocs/op"}},
			{"`Layout.Decode`", "BenchmarkDecode", []string{"ns/op", "allocs/op"}},
			{"`Layout.Compose`", "BenchmarkCompose", []string{"ns/op", "allocs/op"}},
			{"`router.ShardOfKey`", "BenchmarkShardOfKey", []string{"ns/op", "allocs/op"}},
			{"`router.ShardOfString`", "BenchmarkShardOfString", []string{"ns/op", "allocs/op"}},
		},
	},
	{
		Name:    "ids-one-shard",
		Command: "go test ./idgen -run '^$' -bench 'OneShard' -count 3",
		Columns: []string{"path", "IDs per ms for one shard"},
		Rows: []Row{
			{"`Next`, one ID per call (own slot)", "BenchmarkNextOneShard", []string{"ms/ns/op"}},
			{"`Fill` of 1024 IDs, `BulkSlots: 1` (own slot only)", "BenchmarkFillOneShard/slots=1", []string{"ids/ms"}},
			{"`Fill` of 1024 IDs, default (20 slots)", "BenchmarkFillOneShard/slots=20", []string{"ids/ms"}},
		},
	},
}

// Results are a result file read back: each benchmark's values per unit,
// one per run, and the file's configuration lines (cpu, goos, loadavg…).
type Results struct {
	Config map[string]string
	Values map[string]map[string][]float64 // bench → unit → values
	Procs  int                             // the -GOMAXPROCS suffix of the benchmarks
}

var procsRE = regexp.MustCompile(`-(\d+)$`)

// ParseResults reads Go benchmark output.
func ParseResults(r io.Reader) (*Results, error) {
	res := &Results{Config: map[string]string{}, Values: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.ContainsAny(k, " \t") && k != "" && !strings.HasPrefix(k, "Benchmark") {
			if _, seen := res.Config[k]; !seen {
				res.Config[k] = strings.TrimSpace(v)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if m := procsRE.FindStringSubmatch(name); m != nil {
			res.Procs, _ = strconv.Atoi(m[1])
			name = strings.TrimSuffix(name, m[0])
		}
		if res.Values[name] == nil {
			res.Values[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", line, err)
			}
			res.Values[name][f[i+1]] = append(res.Values[name][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// Render returns the text between a figure's markers: the command, the
// table, and the machine it ran on.
func (fig Figure) Render(res *Results) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "```sh\n%s\n```\n\n", fig.Command)
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(fig.Columns, " | "), strings.Repeat("---|", len(fig.Columns)))
	runs := 0
	for _, row := range fig.Rows {
		cells := []string{row.Label}
		for _, unit := range row.Units {
			vals, err := res.values(row.Bench, unit)
			if err != nil {
				return "", fmt.Errorf("figure %s: %v", fig.Name, err)
			}
			runs = max(runs, len(vals))
			cells = append(cells, span(vals))
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	machine := res.Config["cpu"]
	if machine == "" {
		machine = "an unnamed CPU"
	}
	fmt.Fprintf(&b, "\nTaken by `make figures`: %d runs on %s, %s/%s, GOMAXPROCS %d", runs, machine, res.Config["goos"], res.Config["goarch"], res.Procs)
	if l := res.Config["loadavg"]; l != "" {
		fmt.Fprintf(&b, ", load average %s at the start", l)
	}
	b.WriteString(".\n")
	return b.String(), nil
}

func (res *Results) values(bench, unit string) ([]float64, error) {
	if rest, ok := strings.CutPrefix(unit, "ms/"); ok {
		vals, err := res.values(bench, rest)
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = 1e6 / v
		}
		return out, err
	}
	vals := res.Values[bench][unit]
	if len(vals) == 0 {
		return nil, fmt.Errorf("no %s for %s in the results", unit, bench)
	}
	return vals, nil
}

// span is the range of a cell's values, at three significant digits.
func span(vals []float64) string {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	lo, hi := num(s[0]), num(s[len(s)-1])
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// Replace puts text between the page's markers of the named figure.
func Replace(page, name, text string) (string, error) {
	begin, end := "<!-- figures:"+name+" -->\n", "<!-- /figures:"+name+" -->"
	i := strings.Index(page, begin)
	j := strings.Index(page, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("the page has no %s … %s markers", strings.TrimSpace(begin), end)
	}
	return page[:i+len(begin)] + text + page[j:], nil
}

// Between returns the text between the page's markers of the named figure.
func Between(page, name string) (string, bool) {
	begin, end := "<!-- figures:"+name+" -->\n", "<!-- /figures:"+name+" -->"
	i := strings.Index(page, begin)
	j := strings.Index(page, end)
	if i < 0 || j < i {
		return "", false
	}
	return page[i+len(begin) : j], true
}
