package docscheck

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the module's directory, relative to this package.
const root = "../../.."

// pending lists pages written on other branches: a link to one may dangle
// until it lands, and is checked like any other once the file exists.
var pending = map[string]bool{
	"docs/pooler.md": true, // deploying behind a connection pooler
}

// documents returns the Markdown files the test checks, relative to root.
func documents(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs
}

// block is a fenced code block of a document.
type block struct {
	lang string
	line int // line of the opening fence, 1-based
	text []string
}

// document is a Markdown file split into its prose lines (code blocks
// blanked) and its code blocks.
type document struct {
	prose  []string
	blocks []block
}

var fenceRE = regexp.MustCompile("^\\s*(`{3,}|~{3,})\\s*([A-Za-z0-9_+-]*)")

func parse(src string) document {
	var d document
	lines := strings.Split(src, "\n")
	var open string // the fence that opened the current block
	var cur *block
	for i, l := range lines {
		if open != "" {
			if strings.HasPrefix(strings.TrimSpace(l), open) && strings.Trim(strings.TrimSpace(l), open[:1]) == "" {
				d.blocks = append(d.blocks, *cur)
				open, cur = "", nil
			} else {
				cur.text = append(cur.text, l)
			}
			d.prose = append(d.prose, "")
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			open = m[1]
			cur = &block{lang: m[2], line: i + 1}
			d.prose = append(d.prose, "")
			continue
		}
		d.prose = append(d.prose, l)
	}
	return d
}

// anchors returns the fragment of every heading of a document, as GitHub
// makes them: lower case, punctuation dropped, spaces to hyphens, and -1,
// -2… after repeats.
func anchors(d document) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range d.prose {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if h == "" || h[0] != ' ' {
			continue
		}
		a := slug(strings.TrimSpace(h))
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(h string) string {
	h = linkRE.ReplaceAllString(h, "$1") // [text](url) reads as text
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	linkRE = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	codeRE = regexp.MustCompile("`[^`]*`")
)

func TestLinksResolve(t *testing.T) {
	parsed := map[string]document{}
	load := func(rel string) (document, bool) {
		if d, ok := parsed[rel]; ok {
			return d, true
		}
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return document{}, false
		}
		d := parse(string(src))
		parsed[rel] = d
		return d, true
	}
	for _, name := range documents(t) {
		d, ok := load(name)
		if !ok {
			t.Errorf("%s: cannot read it", name)
			continue
		}
		for i, l := range d.prose {
			l = codeRE.ReplaceAllString(l, "")
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				rel := name
				if path != "" {
					rel = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
				}
				where := name + ":" + strconv.Itoa(i+1) + ": link " + target
				if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
					if pending[rel] {
						t.Logf("%s: %s is not here yet (pending)", where, rel)
						continue
					}
					t.Errorf("%s: %s does not exist", where, rel)
					continue
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					t.Errorf("%s: a #fragment on a file that is not Markdown", where)
					continue
				}
				td, _ := load(rel)
				if !anchors(td)[frag] {
					t.Errorf("%s: %s has no heading #%s", where, rel, frag)
				}
			}
		}
	}
}

// testCode returns every _test.go file of the module as lines without
// their indentation, so that a document's block matches an example's body
// however deeply the body is indented.
func testCode(t *testing.T) [][]string {
	t.Helper()
	var files [][]string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && p != root && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines = append(lines, strings.TrimSpace(sc.Text()))
		}
		files = append(files, lines)
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// contains reports whether want appears as consecutive lines of have.
func contains(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		ok := true
		for j, w := range want {
			if have[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestGoBlocksCompile(t *testing.T) {
	tests := testCode(t)
	for _, name := range documents(t) {
		src, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range parse(string(src)).blocks {
			if b.lang != "go" {
				continue
			}
			want := make([]string, len(b.text))
			for i, l := range b.text {
				want[i] = strings.TrimSpace(l)
			}
			found := false
			for _, have := range tests {
				if contains(have, want) {
					found = true
					break
				}
			}
			if found {
				continue
			}
			if len(want) > 0 && strings.HasPrefix(want[0], "package ") {
				if out, err := compile(t, strings.Join(b.text, "\n")); err != nil {
					t.Errorf("%s:%d: the go block does not compile:\n%s", name, b.line, out)
				}
				continue
			}
			t.Errorf("%s:%d: the go block is not the text of an example in a _test.go file, and is not a file that compiles on its own (add it to an Example and quote it verbatim)", name, b.line)
		}
	}
}

// compile builds src as a package of the module, through an overlay, so
// that nothing is written into the module's directory.
func compile(t *testing.T, src string) (string, error) {
	t.Helper()
	tmp := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(root, "internal", "harness", "docscheck", "snippet", "snippet.go"))
	if err != nil {
		return "", err
	}
	file := filepath.Join(tmp, "snippet.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return "", err
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{abs: file}})
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "-o", os.DevNull, filepath.Dir(abs))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sample is benchmark output in Go's format, as a figure's command writes it.
const sample = `loadavg: 0.42
goos: linux
goarch: amd64
pkg: github.com/shardkit/shardkit/idgen
cpu: Test CPU
BenchmarkNextOneShard-2   	   22932	     58000 ns/op	      12 B/op	       0 allocs/op
BenchmarkNextOneShard-2   	   22900	     62500 ns/op	      11 B/op	       0 allocs/op
BenchmarkFillOneShard/slots=1-2   	      18	  63967697 ns/op	        16.01 ids/ms	     62468 ns/id
BenchmarkFillOneShard/slots=20-2  	     369	   3250474 ns/op	       315.0 ids/ms	      3174 ns/id
BenchmarkFillOneShard/slots=20-2  	     368	   3247661 ns/op	       315.3 ids/ms	      3172 ns/id
PASS
`

func TestFigureRender(t *testing.T) {
	res, err := ParseResults(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var fig Figure
	for _, f := range Figures {
		if f.Name == "ids-one-shard" {
			fig = f
		}
	}
	got, err := fig.Render(res, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "```sh\n" + fig.Command + "\n```\n\n" +
		"| path | IDs per ms for one shard |\n|---|---|\n" +
		"| `Next`, one ID per call (own slot) | 16.0–17.2 |\n" +
		"| `Fill` of 1024 IDs, `BulkSlots: 1` (own slot only) | 16.0 |\n" +
		"| `Fill` of 1024 IDs, default (20 slots) | 315 |\n" +
		"\nTaken by `make figures`: 2 runs on Test CPU, linux/amd64, GOMAXPROCS 2, load average 0.42 at the start.\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestParseResultsLoggedBenchmark: a benchmark that logs while it runs
// has its name and its values on different lines, with the log between;
// the values are still the benchmark's, and the log's own numbers are not.
func TestParseResultsLoggedBenchmark(t *testing.T) {
	res, err := ParseResults(strings.NewReader(`goos: linux
cpu: Test CPU
BenchmarkAtomic-2   	2026/12/04 19:02:36 WARN shardkit: the server's DSN connects as a superuser server=a
2026/12/04 19:02:36 WARN shardkit: the server's DSN connects as a superuser server=b
    3 shards	seeded
    1000	   2788019 ns/op	         1.262 atomic/two-txs
BenchmarkAtomic-2   	    1000	   2620268 ns/op	         1.209 atomic/two-txs
BenchmarkAtomic-2   	--- some output
    12 rows copied
PASS
    1000	   1 ns/op	         9 atomic/two-txs
`))
	if err != nil {
		t.Fatal(err)
	}
	got := res.Values["BenchmarkAtomic"]["atomic/two-txs"]
	if want := []float64{1.262, 1.209}; !slices.Equal(got, want) {
		t.Errorf("atomic/two-txs: %v, want %v (the result after the log, the whole line; not the line after PASS)", got, want)
	}
	if res.Procs != 2 {
		t.Errorf("procs %d, want 2", res.Procs)
	}
}

// FuzzParseResults: any text parses or is refused with an error, never a
// panic.
func FuzzParseResults(f *testing.F) {
	f.Add(sample)
	f.Add("BenchmarkX-2 \tlog\n    10\t5 ns/op\n")
	f.Fuzz(func(t *testing.T, text string) {
		_, _ = ParseResults(strings.NewReader(text))
	})
}

// TestFiguresMatchResults fails when a maintained table of the performance
// page differs from what its kept result file renders: such a table was
// edited by hand, or make figures was not run to the end.
func TestFiguresMatchResults(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fig := range Figures {
		have, ok := Between(string(page), fig.Name)
		if !ok {
			t.Errorf("docs/performance.md has no markers for figure %s", fig.Name)
			continue
		}
		f, err := os.Open(filepath.Join(root, "docs", "figures", fig.Results()+".txt"))
		if err != nil {
			continue // not measured by make figures yet: the page's text stands
		}
		res, err := ParseResults(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		stale, err := fig.Stale(res, root)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fig.Render(res, stale)
		if err != nil {
			t.Fatal(err)
		}
		if have != want && stale && !strings.Contains(have, "Not re-taken since") {
			t.Errorf("figure %s: the code it measures (%s) changed since docs/figures/%s.txt was taken: "+
				"run make figures on a quiet machine (go run ./internal/harness/docscheck/figures -run -only %s), "+
				"or go run ./internal/harness/docscheck/figures to mark the table on docs/performance.md as not re-taken",
				fig.Name, strings.Join(fig.Packages(), " "), fig.Results(), fig.Name)
		} else if have != want {
			t.Errorf("figure %s on docs/performance.md differs from docs/figures/%s.txt: run make figures, or go run ./internal/harness/docscheck/figures to render the kept results", fig.Name, fig.Results())
		}
	}
}

// TestFigureTemplates checks Row.Cells and Notes: {NAME UNIT} placeholders,
// names relative to the row's Bench, division and signs.
func TestFigureTemplates(t *testing.T) {
	res, err := ParseResults(strings.NewReader(`goos: linux
goarch: amd64
cpu: Test CPU
BenchmarkRouting/select_by_key-2  	 200000	 9000 ns/op	 430 overhead-median-ns/op	 0 overhead-allocs/op
BenchmarkRouting/select_by_key-2  	 200000	 9100 ns/op	 470 overhead-median-ns/op	 0 overhead-allocs/op
BenchmarkRouting/unregistered-2   	 200000	 9100 ns/op	 -120 overhead-median-ns/op
BenchmarkRouting/unregistered-2   	 200000	 9100 ns/op	 300 overhead-median-ns/op
BenchmarkMoveFigures-2	1	7.5 fenced-ms
BenchmarkLayers/plugin/round_1-2	20	1 ns/op	31.5 ratio
BenchmarkLayers/plugin/round_0-2	20	1 ns/op	27.25 ratio
BenchmarkLayers/pluginx/round_0-2	20	1 ns/op	99 ratio
`))
	if err != nil {
		t.Fatal(err)
	}
	fig := Figure{
		Name:    "t",
		From:    "other",
		Columns: []string{"statement", "overhead", "allocations"},
		Rows: []Row{
			{Label: "select by key", Bench: "BenchmarkRouting/select_by_key", Cells: []string{"{. overhead-median-ns/op /1e3 +} µs", "{. overhead-allocs/op +}"}},
			{Label: "unregistered", Bench: "BenchmarkRouting", Cells: []string{"{/unregistered overhead-median-ns/op /1e3 +} µs", "–"}},
			{Label: "rounds", Bench: "BenchmarkLayers/plugin/round_*", Cells: []string{"{. ratio}×", "–"}},
		},
		Notes: []string{"The window took {BenchmarkMoveFigures fenced-ms} ms."},
	}
	got, err := fig.Render(res, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "| statement | overhead | allocations |\n|---|---|---|\n" +
		"| select by key | +0.43–0.47 µs | +0 |\n" +
		"| unregistered | -0.12–+0.30 µs | – |\n" +
		"| rounds | 27.2–31.5× | – |\n" +
		"\nTaken by `make figures`: 2 runs on Test CPU, linux/amd64, GOMAXPROCS 2.\n" +
		"\nThe window took 7.50 ms.\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	fig.Rows[0].Cells[0] = "{. no-such-unit}"
	if _, err := fig.Render(res, false); err == nil {
		t.Error("a unit the results lack: no error")
	}
}

// TestFiguresRender renders every maintained figure from results that hold
// each value its rows and notes name: a template that does not parse (a
// brace, an option) fails here, not on the first make figures.
func TestFiguresRender(t *testing.T) {
	placeholder := regexp.MustCompile(`\{([^}]*)\}`)
	for _, fig := range Figures {
		res := &Results{Config: map[string]string{}, Values: map[string]map[string][]float64{}}
		add := func(bench, unit string) {
			unit = strings.TrimPrefix(unit, "ms/")
			if res.Values[bench] == nil {
				res.Values[bench] = map[string][]float64{}
			}
			res.Values[bench][unit] = []float64{1}
		}
		for _, row := range fig.Rows {
			for _, u := range row.Units {
				add(row.Bench, u)
			}
			for _, tmpl := range append(append([]string(nil), row.Cells...), fig.Notes...) {
				for _, m := range placeholder.FindAllStringSubmatch(tmpl, -1) {
					f := strings.Fields(m[1])
					if len(f) < 2 {
						continue // Render reports it
					}
					name := f[0]
					switch {
					case name == ".":
						name = row.Bench
					case strings.HasPrefix(name, "/"):
						name = row.Bench + name
					}
					add(name, f[1])
				}
			}
		}
		if _, err := fig.Render(res, false); err != nil {
			t.Errorf("figure %s: %v", fig.Name, err)
		}
	}
}

// TestStaleFigure: a figure is stale once a non-test Go file of a package its
// command names changes, not when a test or another package does.
func TestStaleFigure(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plugin/a.go", "package plugin\n")
	write("plugin/a_test.go", "package plugin\n")
	write("plugin/sub/b.go", "package sub\n")
	write("router/r.go", "package router\n")
	fig := Figure{Name: "f", Command: "go test ./plugin/ -run '^$' -bench .", Measures: []string{"./examples/..."}}
	write("examples/x/main.go", "package main\n")
	if got, want := fig.Packages(), []string{"./examples/...", "./plugin"}; !slices.Equal(got, want) {
		t.Fatalf("Packages() = %v, want %v", got, want)
	}
	hash, err := CodeHash(dir, fig.Packages())
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseResults(strings.NewReader(CodeLine(hash, fig.Packages()) + "\ngoos: linux\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		file, text string
		stale      bool
	}{
		{"plugin/a_test.go", "package plugin // a test changed\n", false},
		{"router/r.go", "package router // another package\n", false},
		{"plugin/sub/b.go", "package sub // a package below, not named\n", false},
		{"plugin/a.go", "package plugin // the measured code\n", true},
		{"plugin/a.go", "package plugin\n", false}, // back as it was taken
		{"examples/x/deep/c.go", "package deep\n", true},
	} {
		write(step.file, step.text)
		stale, err := fig.Stale(res, dir)
		if err != nil {
			t.Fatal(err)
		}
		if stale != step.stale {
			t.Errorf("after writing %s: Stale = %v, want %v", step.file, stale, step.stale)
		}
	}
	noCode, _ := ParseResults(strings.NewReader("goos: linux\n"))
	if stale, err := fig.Stale(noCode, dir); err != nil || !stale {
		t.Errorf("a result file without a code line: Stale = %v, %v; want true", stale, err)
	}
	text, err := Figure{Name: "f", Command: "go test ./plugin", Columns: []string{"a"}}.Render(res, true)
	if err != nil || !strings.Contains(text, "Not re-taken since the code it measures changed** (`./plugin`)") {
		t.Errorf("a stale figure renders without saying so:\n%s\n%v", text, err)
	}
}

// TestCommandRuns: the runs a table says it was taken in come from its
// command when the command says, not from how many values a test wrote in
// each run (the fence lease's seal is written once per cutover).
func TestCommandRuns(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		want int
	}{
		{"go test ./idgen -run '^$' -bench . -count 3", 3},
		{"go test -count=3 -run 'TestFenceLease$' ./rebalance/", 3},
		{"SHARDKIT_MOVE_FIGURES=1000000 go test ./rebalance -run TestMoveFigures -count 3 -timeout 90m &&\ngo test ./rebalance -bench BenchmarkMoveCopy -benchtime 3x", 3},
		{"for run in 1 2 3; do make demo >&2 || exit 1; done", 3},
		{"go test ./plugin -run '^$' -bench BenchmarkExecModes -benchtime 2000x", 0},
	} {
		if got := commandRuns(c.cmd); got != c.want {
			t.Errorf("commandRuns(%q) = %d, want %d", c.cmd, got, c.want)
		}
	}
	res, err := ParseResults(strings.NewReader("goos: linux\ngoarch: amd64\ncpu: Test CPU\n" +
		strings.Repeat("BenchmarkFenceLease/seal-2\t1\t1.5 seal-ms\n", 7)))
	if err != nil {
		t.Fatal(err)
	}
	fig := Figure{Name: "f", Command: "go test -count=3 ./rebalance", Columns: []string{"figure", "measured"},
		Rows: []Row{{Label: "the seal", Bench: "BenchmarkFenceLease/seal", Cells: []string{"{. seal-ms} ms"}}}}
	got, err := fig.Render(res, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "Taken by `make figures`: 3 runs on Test CPU") {
		t.Errorf("seven values of three runs render as:\n%s", got)
	}
}
