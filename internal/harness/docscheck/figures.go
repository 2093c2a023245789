package docscheck

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A Figure is one table of docs/performance.md that make figures maintains:
// the command that measures it, and how its rows are read from the
// command's output, which is Go's benchmark format (`go test -bench`),
// stable across Go releases. Tests that take figures without being
// benchmarks write the same format through internal/harness/benchout.
type Figure struct {
	Name string // the page's marker: <!-- figures:Name -->
	// Command is run from the module's root; its output, and the lines
	// tests wrote to the file $SHARDKIT_FIGURES_OUT names, make the result
	// file.
	Command string
	// From names another figure whose result file this one reads, for a
	// second table of one command's output; Command is then empty.
	From string
	// Measures names packages whose code the figure measures besides the
	// ones Command names ("./plugin", "./examples/photos/..."): a change to
	// their non-test Go files makes the figure stale (see Stale).
	Measures []string
	Columns  []string // column titles; the first is the rows' labels
	Rows     []Row
	// Notes are paragraphs after the table, templates as Row.Cells are.
	Notes []string
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
	// Cells, when set instead of Units, are the cells after the label as
	// templates: text in which {NAME UNIT} stands for the range of that
	// unit's values. NAME is a benchmark's name; "." is the row's Bench,
	// and a NAME starting with "/" is appended to it. Optional words
	// after the unit: "/1e3" (or any "/N") divides the values, "+" writes
	// their sign. "{NAME UNIT /1e3 +} µs" reads "+0.43–0.47 µs".
	Cells []string
}

// Results names the figure whose result file (docs/figures/NAME.txt) this
// one reads: its own, or From's.
func (fig Figure) Results() string {
	if fig.From != "" {
		return fig.From
	}
	return fig.Name
}

// Results are a result file read back: each benchmark's values per unit,
// one per run, and the file's configuration lines (cpu, goos, loadavg…).
type Results struct {
	Config map[string]string
	Values map[string]map[string][]float64 // bench → unit → values
	Procs  int                             // the -GOMAXPROCS suffix of the benchmarks
}

var procsRE = regexp.MustCompile(`-(\d+)$`)

// resultFields reports whether f is a result line's fields after the
// name: the iterations, then pairs of a number and its unit.
func resultFields(f []string) bool {
	if _, err := strconv.Atoi(f[0]); err != nil {
		return false
	}
	for i := 1; i < len(f); i += 2 {
		if _, err := strconv.ParseFloat(f[i], 64); err != nil {
			return false
		}
	}
	return true
}

// ParseResults reads Go benchmark output. A benchmark that writes while it
// runs (a log line) splits its result line: go test prints the name, the
// benchmark's own output after it on the same line and the lines below,
// then the iterations and values on a line of their own, indented. Such a
// line is the result of the last name seen without one.
func ParseResults(r io.Reader) (*Results, error) {
	res := &Results{Config: map[string]string{}, Values: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	pending := "" // a benchmark's name whose values are still to come
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.ContainsAny(k, " \t") && k != "" && !strings.HasPrefix(k, "Benchmark") {
			if _, seen := res.Config[k]; !seen {
				res.Config[k] = strings.TrimSpace(v)
			}
			continue
		}
		if line == "PASS" || line == "FAIL" || strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "--- ") {
			pending = "" // the end of a benchmark's output or of the package's
			continue
		}
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			pending = ""
			if len(f) < 2 {
				pending = f[0]
				continue
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				pending = f[0]
				continue
			}
		} else if pending != "" && len(f) >= 3 && len(f)%2 == 1 && (line[0] == ' ' || line[0] == '\t') {
			if !resultFields(f) {
				continue // the benchmark's own output
			}
			f = append([]string{pending}, f...)
			pending = ""
		} else {
			continue
		}
		if len(f) < 4 || len(f)%2 != 0 {
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
// table, the machine it ran on, and, when stale, that the code it measures
// changed since.
func (fig Figure) Render(res *Results, stale bool) (string, error) {
	var b strings.Builder
	if fig.Command != "" {
		fmt.Fprintf(&b, "```sh\n%s\n```\n\n", fig.Command)
	}
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
			cells = append(cells, span(vals, false))
		}
		for _, tmpl := range row.Cells {
			cell, n, err := res.fill(tmpl, row.Bench)
			if err != nil {
				return "", fmt.Errorf("figure %s: %v", fig.Name, err)
			}
			runs = max(runs, n)
			cells = append(cells, cell)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	if n := commandRuns(fig.command()); n > 0 {
		runs = min(runs, n) // a test may write several values a run, a benchmark several rounds
	}
	machine := res.Config["cpu"]
	if machine == "" {
		machine = "an unnamed CPU"
	}
	plural := "s"
	if runs == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "\nTaken by `make figures`: %d run%s on %s, %s/%s, GOMAXPROCS %d", runs, plural, machine, res.Config["goos"], res.Config["goarch"], res.Procs)
	if l := res.Config["loadavg"]; l != "" {
		fmt.Fprintf(&b, ", load average %s at the start", l)
	}
	b.WriteString(".\n")
	if stale {
		fmt.Fprintf(&b, "\n**Not re-taken since the code it measures changed** (%s): read this table as history until `make figures` takes it again on a quiet machine.\n",
			"`"+strings.Join(fig.Packages(), "`, `")+"`")
	}
	for _, note := range fig.Notes {
		text, _, err := res.fill(note, "")
		if err != nil {
			return "", fmt.Errorf("figure %s: %v", fig.Name, err)
		}
		fmt.Fprintf(&b, "\n%s\n", text)
	}
	return b.String(), nil
}

// fill replaces each {NAME UNIT [/N] [+]} of a template by the range of
// those values, and returns how many values a placeholder had at most.
func (res *Results) fill(tmpl, bench string) (string, int, error) {
	var b strings.Builder
	runs := 0
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), runs, nil
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return "", 0, fmt.Errorf("%q: a { without its }", tmpl)
		}
		f := strings.Fields(tmpl[i+1 : i+j])
		if len(f) < 2 {
			return "", 0, fmt.Errorf("%q: want {NAME UNIT [/N] [+]}", tmpl)
		}
		name := f[0]
		switch {
		case name == ".":
			name = bench
		case strings.HasPrefix(name, "/"):
			name = bench + name
		}
		vals, err := res.values(name, f[1])
		if err != nil {
			return "", 0, err
		}
		runs = max(runs, len(vals))
		signed := false
		for _, opt := range f[2:] {
			switch {
			case opt == "+":
				signed = true
			case strings.HasPrefix(opt, "/"):
				d, err := strconv.ParseFloat(opt[1:], 64)
				if err != nil || d == 0 {
					return "", 0, fmt.Errorf("%q: %q divides by no number", tmpl, opt)
				}
				scaled := make([]float64, len(vals))
				for k, v := range vals {
					scaled[k] = v / d
				}
				vals = scaled
			default:
				return "", 0, fmt.Errorf("%q: unknown option %q", tmpl, opt)
			}
		}
		b.WriteString(tmpl[:i])
		b.WriteString(span(vals, signed))
		tmpl = tmpl[i+j+1:]
	}
}

// command is the command that took the figure's result file: its own,
// or From's.
func (fig Figure) command() string {
	if fig.From == "" {
		return fig.Command
	}
	for _, f := range Figures {
		if f.Name == fig.From {
			return f.Command
		}
	}
	return ""
}

// values returns a benchmark's values of unit. A name with a * (a
// benchmark's rounds: "BenchmarkX/mode/round_*") takes the values of
// every benchmark it matches, in the order of their names.
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
	if strings.Contains(bench, "*") {
		var names []string
		for name := range res.Values {
			if ok, err := path.Match(bench, name); err != nil {
				return nil, fmt.Errorf("%q: %v", bench, err)
			} else if ok {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		vals = nil
		for _, name := range names {
			vals = append(vals, res.Values[name][unit]...)
		}
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("no %s for %s in the results", unit, bench)
	}
	return vals, nil
}

// span is the range of a cell's values, at three significant digits;
// signed, a range that does not cross zero carries its sign once
// ("+0.43–0.47"), one that does carries both ("-0.12–+0.30").
func span(vals []float64, signed bool) string {
	s := append([]float64(nil), vals...)
	sort.Float64s(s)
	lo, hi := num(s[0]), num(s[len(s)-1])
	if signed && s[0] >= 0 {
		lo = "+" + lo
	}
	if lo == hi || lo == "+"+hi {
		return lo
	}
	if signed && s[0] < 0 && s[len(s)-1] > 0 {
		hi = "+" + hi
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

var (
	countFlag = regexp.MustCompile(`-count[= ](\d+)`)
	runLoop   = regexp.MustCompile(`for run in ([\d ]+);`)
)

// commandRuns is how many runs a figure's command makes, as its first
// -count or its "for run in 1 2 3" loop says; 0 when it says neither.
func commandRuns(cmd string) int {
	if m := countFlag.FindStringSubmatch(cmd); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if m := runLoop.FindStringSubmatch(cmd); m != nil {
		return len(strings.Fields(m[1]))
	}
	return 0
}
