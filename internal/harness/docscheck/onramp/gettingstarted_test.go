// Package onramp runs the pages a new user starts from as they are written,
// on throwaway clusters, so that they cannot drift from the code:
// docs/getting-started.md here, and docs/adopting.md's code in
// adopting_test.go (the docs check finds each of its Go blocks there).
//
// Each fenced block of docs/getting-started.md that the run uses is
// preceded by a marker line, <!-- getting-started: KIND -->:
//
//   - servers: how a reader starts the servers; not run (the test starts
//     its own clusters, with the settings the block gives);
//   - env: export NAME=VALUE lines; the test sets the same names to its
//     own databases;
//   - main.go: the program, compiled as a package of this module;
//   - build: how a reader builds it in a module of their own; not run (the
//     test builds main.go into ./photos with this module's dependencies);
//   - run: shell run with bash -eu in the reader's directory, with the
//     module's shardctl first on PATH;
//   - output: the text the run block before it ends with, "…" standing
//     for any text.
package onramp

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// root is the module's directory, relative to this package.
const root = "../../../.."

const page = "docs/getting-started.md"

// block is a fenced code block of the page with the marker before it.
type block struct {
	kind string // the marker's KIND, "" without a marker
	lang string
	line int // of the opening fence, 1-based
	text string
}

var (
	markerRE = regexp.MustCompile(`^<!-- getting-started: ([a-z.]+) -->$`)
	fenceRE  = regexp.MustCompile("^```([A-Za-z0-9_+-]*)$")
	exportRE = regexp.MustCompile(`^export ([A-Z_][A-Z0-9_]*)=\S+(\s+#.*)?$`)
)

// blocks splits src into its fenced blocks.
func blocks(src string) []block {
	var out []block
	var cur *block
	marker := ""
	for i, l := range strings.Split(src, "\n") {
		if cur != nil {
			if l == "```" {
				out = append(out, *cur)
				cur = nil
			} else {
				cur.text += l + "\n"
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			cur = &block{kind: marker, lang: m[1], line: i + 1}
			marker = ""
			continue
		}
		if m := markerRE.FindStringSubmatch(l); m != nil {
			marker = m[1]
		} else if strings.TrimSpace(l) != "" {
			marker = "" // a marker names the block right after it
		}
	}
	return out
}

// TestPageMarkers: the page has the blocks the run needs, each in the
// language its kind says; cheap, and runs in -short too.
func TestPageMarkers(t *testing.T) {
	bs := readPage(t)
	count := map[string]int{}
	for _, b := range bs {
		want := map[string]string{"servers": "sh", "env": "sh", "main.go": "go", "build": "sh", "run": "sh", "output": "text"}[b.kind]
		if b.kind != "" && want == "" {
			t.Errorf("%s:%d: unknown marker %q", page, b.line, b.kind)
		}
		if want != "" && b.lang != want {
			t.Errorf("%s:%d: a %s block is ```%s, want ```%s", page, b.line, b.kind, b.lang, want)
		}
		if b.kind == "" && (b.lang == "sh" || b.lang == "go") {
			t.Errorf("%s:%d: a ```%s block without a getting-started marker: say whether the run uses it", page, b.line, b.lang)
		}
		count[b.kind]++
	}
	for _, k := range []string{"servers", "env", "main.go", "build"} {
		if count[k] != 1 {
			t.Errorf("%s: %d %s blocks, want 1", page, count[k], k)
		}
	}
	if count["run"] == 0 {
		t.Errorf("%s: no run block", page)
	}
}

func readPage(t *testing.T) []block {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	return blocks(string(src))
}

// env is what the page's env block names, set to the test's databases.
func env(t *testing.T, b block) []string {
	t.Helper()
	dsns := map[string]string{
		"SHARDKIT_CATALOG": pgtest.NewDatabase(t, 0),
		"APP_DB":           pgtest.NewDatabase(t, 0),
		"SERVER_A":         pgtest.NewDatabase(t, 0),
		"SERVER_B":         pgtest.NewDatabase(t, 1),
	}
	var out, names []string
	for _, l := range strings.Split(strings.TrimSpace(b.text), "\n") {
		m := exportRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("%s:%d: the env block's line %q is not export NAME=VALUE", page, b.line, l)
		}
		dsn, ok := dsns[m[1]]
		if !ok {
			t.Fatalf("%s:%d: the env block sets %s, which the run does not provide (it has SHARDKIT_CATALOG, APP_DB, SERVER_A, SERVER_B)", page, b.line, m[1])
		}
		names = append(names, m[1])
		out = append(out, m[1]+"="+dsn)
	}
	if len(names) != len(dsns) {
		t.Fatalf("%s:%d: the env block sets %v, want each of SHARDKIT_CATALOG, APP_DB, SERVER_A, SERVER_B", page, b.line, names)
	}
	return out
}

// build compiles the module's shardctl into bin and the page's program
// into dir/photos, as a package of this module (an overlay: nothing is
// written into the module's directory).
func build(t *testing.T, program, bin, dir string) {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(root, "internal", "harness", "docscheck", "onramp", "photos", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{abs: file}})
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"build", "-o", filepath.Join(bin, "shardctl"), "./cmd/shardctl"},
		{"build", "-overlay", ov, "-o", filepath.Join(dir, "photos"), "./internal/harness/docscheck/onramp/photos"},
	} {
		cmd := exec.Command("go", c...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
}

// matches reports whether out ends with the lines of want, "…" in want
// standing for any text within a line.
func matches(out, want string) bool {
	outLines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	wantLines := strings.Split(strings.TrimRight(want, "\n"), "\n")
	if len(outLines) < len(wantLines) {
		return false
	}
	outLines = outLines[len(outLines)-len(wantLines):]
	for i, w := range wantLines {
		parts := strings.Split(w, "…")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		if !regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(outLines[i]) {
			return false
		}
	}
	return true
}

func TestMatches(t *testing.T) {
	out := "moved\nphoto 123 of user 7: logical shard 7, server b; the user has 2 photo(s)\n"
	if !matches(out, "photo … of user 7: logical shard 7, server b; the user has 2 photo(s)\n") {
		t.Error("the output does not match its own text")
	}
	for _, want := range []string{
		"photo … of user 7: logical shard 7, server a; the user has 2 photo(s)\n",
		"photo … of user 7\n",
		"x\nmoved\nphoto …\n",
	} {
		if matches(out, want) {
			t.Errorf("%q matches %q", out, want)
		}
	}
}

// TestGettingStarted runs the page from its env block on: provisioning
// with shardctl init, the program's write and read by ID, a move of the
// shard with shardctl, and the program again, each run block's output
// compared with the output block after it. About 20 s.
func TestGettingStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters and moves a shard")
	}
	bs := readPage(t)
	dir, bin := t.TempDir(), t.TempDir()
	var vars []string
	for _, b := range bs {
		switch b.kind {
		case "env":
			vars = env(t, b)
		case "main.go":
			build(t, b.text, bin, dir)
		}
	}
	if vars == nil {
		t.Fatalf("%s: no env block", page)
	}
	if _, err := os.Stat(filepath.Join(dir, "photos")); err != nil {
		t.Fatalf("%s: no main.go block built: %v", page, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	environ := append(slices.Clone(os.Environ()), vars...)
	environ = append(environ, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var last string // the output of the last run block
	for _, b := range bs {
		switch b.kind {
		case "run":
			cmd := exec.CommandContext(ctx, "bash", "-eu", "-c", b.text)
			cmd.Dir = dir
			cmd.Env = environ
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			t.Logf("%s:%d (%s):\n%s%s", page, b.line, time.Since(start).Round(time.Millisecond), b.text, out.String())
			if err != nil {
				t.Fatalf("%s:%d: the run block failed: %v\n%s", page, b.line, err, out.String())
			}
			last = out.String()
		case "output":
			if !matches(last, b.text) {
				t.Errorf("%s:%d: the run block before it printed\n%s\nwhich does not end with\n%s", page, b.line, last, b.text)
			}
		}
	}
}
