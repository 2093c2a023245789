package layout

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// plugin/doc.go maps every non-test file of package plugin, by concern,
// and the read path's files by stage. The map is checked against the
// directory, so that a file added, renamed or removed cannot leave it
// behind.

var (
	mapSection = regexp.MustCompile(`^// ([A-Z][^:]*):$`)
	mapEntry   = regexp.MustCompile(`^//\t(\S+)(?:\s+(.*))?$`)
	readFile   = regexp.MustCompile(`^read_([a-z]+)[_.]`)
)

// readStages are the read path's stages, in the order a read runs them;
// a read_<stage>… file is listed under "Read path, <stage>".
var readStages = []string{"plan", "render", "exec", "merge", "scan"}

// checkFileMap returns what is wrong with doc (doc.go's text) as a map of
// files, the package's non-test .go files.
func checkFileMap(doc string, files []string) []string {
	var bad []string
	_, after, ok := strings.Cut(doc, "\n// # Files\n")
	if !ok {
		return []string{"no \"// # Files\" section: add the file map"}
	}
	section := ""
	listed := map[string]string{} // file: its section
	for _, line := range strings.Split(after, "\n") {
		if m := mapSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		m := mapEntry.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, what := m[1], strings.TrimSpace(m[2])
		switch {
		case !strings.HasSuffix(name, ".go"):
			bad = append(bad, fmt.Sprintf("map line %q does not start with a .go file's name", line))
			continue
		case section == "":
			bad = append(bad, fmt.Sprintf("%s is listed before any section heading (\"// Concern:\")", name))
		case what == "":
			bad = append(bad, fmt.Sprintf("%s: say in one line what it holds", name))
		}
		if prev, dup := listed[name]; dup {
			bad = append(bad, fmt.Sprintf("%s is listed twice (under %q and %q)", name, prev, section))
		}
		listed[name] = section
		stage, readPath := strings.CutPrefix(section, "Read path, ")
		if m := readFile.FindStringSubmatch(name); m != nil {
			if !slices.Contains(readStages, m[1]) {
				if stage != "entry" {
					bad = append(bad, fmt.Sprintf("%s: %q is not a read stage (%s): name a read path file read_<stage>_…, or list it under \"Read path, entry\"", name, m[1], strings.Join(readStages, ", ")))
				}
			} else if stage != m[1] {
				bad = append(bad, fmt.Sprintf("%s is listed under %q: list it under \"Read path, %s\"", name, section, m[1]))
			}
		} else if readPath && stage != "entry" {
			bad = append(bad, fmt.Sprintf("%s is listed under %q: a file of that stage is named read_%s_…", name, section, stage))
		}
	}
	for _, f := range files {
		if _, ok := listed[f]; !ok {
			bad = append(bad, fmt.Sprintf("%s is not in the file map: add a line for it under its concern (a read path file under its stage)", f))
		}
	}
	for name := range listed {
		if !slices.Contains(files, name) {
			bad = append(bad, fmt.Sprintf("the file map lists %s, which is not a file of the package: remove or rename its line", name))
		}
	}
	slices.Sort(bad)
	return bad
}

func TestPluginFileMap(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "plugin")
	doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			files = append(files, n)
		}
	}
	// A wrong directory would pass trivially.
	if len(files) < 20 {
		t.Fatalf("found %d files in %s; expected package plugin's", len(files), dir)
	}
	for _, b := range checkFileMap(string(doc), files) {
		t.Errorf("plugin/doc.go: %s", b)
	}
}

func TestFileMapCheck(t *testing.T) {
	doc := "package p\n\n// # Files\n//\n// Entry:\n//\n//\tdoc.go   the map\n//\tgone.go  a file since removed\n//\n" +
		"// Read path, entry:\n//\n//\tread.go  the stages\n//\tread_moved.go  entry files may be named for what they do\n//\tcache.go  an entry file need not be named for a stage\n//\n" +
		"// Read path, plan:\n//\n//\tread_plan.go  the plan\n//\tread_merge_page.go  under the wrong stage\n//\tread_parse.go  no such stage\n//\tread_plan.go  again\n//\n" +
		"// Read path, exec:\n//\n//\tother.go  not named for its stage\n//\tread_exec.go\n"
	files := []string{"doc.go", "read.go", "read_moved.go", "cache.go", "read_plan.go", "read_merge_page.go", "read_parse.go", "other.go", "read_exec.go", "new.go"}
	got := checkFileMap(doc, files)
	want := []string{
		"new.go is not in the file map",
		"the file map lists gone.go",
		"read_merge_page.go is listed under \"Read path, plan\"",
		"read_parse.go: \"parse\" is not a read stage",
		"read_plan.go is listed twice",
		"other.go is listed under \"Read path, exec\"",
		"read_exec.go: say in one line",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no complaint starting %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d complaints, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	if got := checkFileMap("package p\n", nil); len(got) != 1 {
		t.Errorf("a doc.go without a map: got %q, want one complaint", got)
	}
}

// execImports returns the GORM packages among deps, the packages the
// read path's execute stage (plugin/internal/readexec) builds with. The
// stage's goroutines run beside the caller's, which owns every GORM
// value; with no GORM package in its build they cannot reach one.
func execImports(deps []string) (bad []string) {
	for _, d := range deps {
		if strings.HasPrefix(d, "gorm.io/") {
			bad = append(bad, d)
		}
	}
	return bad
}

const readexec = module + "/plugin/internal/readexec"

func TestReadExecImportsNoGorm(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", readexec).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %s: %v\n%s", readexec, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	fields := strings.Fields(string(out))
	// A missing package or an empty listing would pass trivially.
	if len(fields) < 10 || fields[0] != readexec || !slices.Contains(fields, "github.com/jackc/pgx/v5") {
		t.Fatalf("go list %s: %q; expected the execute stage and its dependencies (pgx among them)", readexec, out)
	}
	for _, b := range execImports(fields[1:]) {
		t.Errorf("%s builds with %s: the execute stage runs on other goroutines and must not touch GORM state; render what it needs on the caller's goroutine (plugin/read_render*.go) and hand it over as plain values", readexec, b)
	}
}

func TestExecImportsCheck(t *testing.T) {
	deps := []string{"context", "database/sql", "gorm.io/gorm", "github.com/jackc/pgx/v5", "gorm.io/gorm/clause", "example.com/gorm.io/x"}
	if bad := execImports(deps); !slices.Equal(bad, []string{"gorm.io/gorm", "gorm.io/gorm/clause"}) {
		t.Errorf("complaints %q; want gorm.io/gorm and gorm.io/gorm/clause", bad)
	}
}
