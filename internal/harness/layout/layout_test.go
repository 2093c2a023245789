// Package layout checks the module's import graph: the library never runs on
// its harnesses. Everything under internal/harness (throwaway clusters,
// fixtures, the scale and figures tools) may import the library; no package of
// the library may import a harness, so a harness can grow test-only
// dependencies and shortcuts without any of them reaching a user's binary.
package layout

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/shardkit/shardkit"

type pkg struct {
	ImportPath string
	Deps       []string
}

// library reports whether path is a package users build into their programs:
// every package of the module except the harnesses and the example service
// (the demo starts its clusters with the harness, as the tests do).
func library(path string) bool {
	rel := strings.TrimPrefix(path, module)
	return !strings.HasPrefix(rel, "/internal/harness") && !strings.HasPrefix(rel, "/examples")
}

func harness(path string) bool {
	return strings.HasPrefix(path, module+"/internal/harness/") || path == module+"/internal/harness"
}

func TestLibraryImportsNoHarness(t *testing.T) {
	// -deps lists every package a package needs to build, not its tests': a
	// test may use any harness.
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	libs := 0
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !library(p.ImportPath) {
			continue
		}
		libs++
		for _, d := range p.Deps {
			if harness(d) {
				t.Errorf("%s imports %s: the library must not run on a harness; move what it needs into a package of its own under internal/", p.ImportPath, d)
			}
		}
	}
	// A wrong module path or an empty listing would pass trivially.
	if libs < 10 {
		t.Fatalf("go list found %d library packages; expected the module's packages", libs)
	}
}
