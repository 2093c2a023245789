package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// useRE finds a cobra command's name in its Use field.
var useRE = regexp.MustCompile(`Use:\s*"([a-z][a-z-]*)`)

// shardctlCommands returns the name of every command and subcommand of
// cmd/shardctl, as their Use fields give them.
func shardctlCommands(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "cmd", "shardctl", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range useRE.FindAllStringSubmatch(string(src), -1) {
			if m[1] != "shardctl" {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// missingCommands returns the commands that a page's shardctl lines do not
// name: a line "shardctl [PARENT] NAME …" in a code block names NAME.
func missingCommands(page string, names []string) []string {
	named := map[string]bool{}
	for _, b := range parse(page).blocks {
		for _, l := range b.text {
			f := strings.Fields(strings.Split(l, "#")[0])
			for i := 0; i < len(f); i++ {
				if f[i] != "shardctl" {
					continue
				}
				for _, w := range f[i+1 : min(i+3, len(f))] {
					named[w] = true
				}
			}
		}
	}
	var missing []string
	for _, n := range names {
		if !named[n] {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestOperationsNamesEveryCommand: the operations page's list of shardctl
// commands names every command and subcommand the binary has, so a new
// command cannot be left out of the manual.
func TestOperationsNamesEveryCommand(t *testing.T) {
	names := shardctlCommands(t)
	if len(names) < 10 {
		t.Fatalf("found %d shardctl commands (%v): the Use fields moved?", len(names), names)
	}
	src, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range missingCommands(string(src), names) {
		t.Errorf("docs/operations.md: no line of its shardctl list names the command %q: add one", n)
	}
	if got := missingCommands("```sh\nshardctl server set-dsn a --app X   # shardctl relay in a comment\n```\n", []string{"server", "set-dsn", "relay"}); !slices.Equal(got, []string{"relay"}) {
		t.Errorf("a command named only in a comment reads as named: missing = %v", got)
	}
}
