// Package onramp runs the pages a new user starts from as they are written,
// on throwaway clusters, so that they cannot drift from the code:
// docs/getting-started.md here, and docs/adopting.md's code in
// adopting_test.go (the docs check finds each of its Go blocks there).
//
// Each fenced block of docs/getting-started.md that the run uses is
// preceded by a marker line, <!-- getting-started: KIND -->:
//
//   - servers: the reader's servers started; run with its ports (55NN)
//     replaced by free ones, as the postgres user when the test runs as
//     root (initdb refuses root), with the packaged server binaries first
//     on PATH; the servers are stopped when the test ends;
//   - env: export NAME=VALUE lines, set for the blocks after it (the same
//     ports replaced);
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
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
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
	exportRE = regexp.MustCompile(`^export ([A-Z_][A-Z0-9_]*)=(\S+)(\s+#.*)?$`)
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

// env returns the variables the page's env block exports, its ports
// replaced by ports.
func env(t *testing.T, b block, ports *strings.Replacer) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(b.text), "\n") {
		m := exportRE.FindStringSubmatch(ports.Replace(l))
		if m == nil {
			t.Fatalf("%s:%d: the env block's line %q is not export NAME=VALUE", page, b.line, l)
		}
		out = append(out, m[1]+"="+m[2])
	}
	return out
}

// portRE finds the ports of the servers block.
var portRE = regexp.MustCompile(`\b55[0-9]{2}\b`)

// startServers runs the page's servers block in dir with its ports
// replaced by free ones, and returns the replacement. The servers it
// starts are stopped (pg_ctl stop) when the test ends.
func startServers(t *testing.T, b block, dir string) *strings.Replacer {
	t.Helper()
	var pairs []string
	for _, p := range slices.Compact(slices.Sorted(slices.Values(portRE.FindAllString(b.text, -1)))) {
		free, err := pglocal.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, p, strconv.Itoa(free))
	}
	if len(pairs) == 0 {
		t.Fatalf("%s:%d: the servers block names no port 55NN", page, b.line)
	}
	ports := strings.NewReplacer(pairs...)
	bin, err := pglocal.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := pglocal.PostgresUser("initdb")
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	stop := func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "*", "*", "postmaster.pid"))
		for _, pid := range pids {
			cmd := exec.Command(filepath.Join(bin, "pg_ctl"), "-D", filepath.Dir(pid), "stop", "-m", "immediate")
			if cred != nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("pg_ctl stop %s: %v\n%s", filepath.Dir(pid), err, out)
			}
		}
	}
	t.Cleanup(stop)
	cmd := exec.Command("bash", "-eu", "-c", ports.Replace(b.text))
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(os.Environ()), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "LC_ALL=C")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil {
			cmd.Env = append(cmd.Env, "HOME="+u.HomeDir)
		}
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s:%d (%s):\n%s%s", page, b.line, time.Since(start).Round(time.Millisecond), ports.Replace(b.text), out)
	if err != nil {
		t.Fatalf("%s:%d: the servers block failed: %v\n%s", page, b.line, err, out)
	}
	return ports
}

// build compiles the module's shardctl into bin and the page's program
// into dir/photos, as a package of this module (an overlay in tmp: nothing
// is written into the module's directory).
func build(program, bin, dir, tmp string) error {
	abs, err := filepath.Abs(filepath.Join(root, "internal", "harness", "docscheck", "onramp", "photos", "main.go"))
	if err != nil {
		return err
	}
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(program), 0o644); err != nil {
		return err
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{abs: file}})
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"build", "-o", filepath.Join(bin, "shardctl"), "./cmd/shardctl"},
		{"build", "-overlay", ov, "-o", filepath.Join(dir, "photos"), "./internal/harness/docscheck/onramp/photos"},
	} {
		cmd := exec.Command("go", c...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(c, " "), err, out)
		}
	}
	return nil
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

// TestGettingStarted runs the page: three servers started with initdb and
// pg_ctl, provisioning with shardctl init, the program's write and read by ID, a move of the
// shard with shardctl, and the program again, each run block's output
// compared with the output block after it. About 20 s.
func TestGettingStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters and moves a shard")
	}
	bs := readPage(t)
	bin := t.TempDir()
	// The reader's directory, where the servers keep their data: not under
	// t.TempDir, which the postgres user may not enter.
	dir, err := os.MkdirTemp("", "getting-started-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // after the servers stop: cleanups run last first
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The builds take CPU, the servers' start mostly the disk: side by side.
	var program *block
	for i := range bs {
		if bs[i].kind == "main.go" {
			program = &bs[i]
		}
	}
	if program == nil {
		t.Fatalf("%s: no main.go block", page)
	}
	tmp := t.TempDir()
	built := make(chan error, 1)
	go func() { built <- build(program.text, bin, dir, tmp) }()
	var buildErr error
	waited := false
	wait := func() error {
		if !waited {
			buildErr, waited = <-built, true
		}
		return buildErr
	}
	t.Cleanup(func() { _ = wait() }) // before dir and tmp are removed
	var ports *strings.Replacer
	var vars []string
	for _, b := range bs {
		switch b.kind {
		case "servers":
			ports = startServers(t, b, dir)
		case "env":
			if ports == nil {
				t.Fatalf("%s:%d: the env block comes before the servers block", page, b.line)
			}
			vars = env(t, b, ports)
		}
	}
	if vars == nil {
		t.Fatalf("%s: no env block", page)
	}
	if err := wait(); err != nil {
		t.Fatalf("%s:%d: the program does not build: %v", page, program.line, err)
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
