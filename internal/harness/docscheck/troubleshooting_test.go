package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTroubleshootingPage: docs/troubleshooting.md is what the exported
// errors' doc comments render, so an error added, renamed or documented
// anew changes the page or fails here.
func TestTroubleshootingPage(t *testing.T) {
	errs, err := Errors(root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Troubleshooting(errs)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, TroubleshootingPage))
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != want {
		t.Fatalf("%s is not what the exported errors render: run go run ./internal/harness/docscheck/troubleshooting and commit the page", TroubleshootingPage)
	}
}

// TestTroubleshootingFindsEveryError: a sentinel or an error type added to
// any library package is on the page, one without a doc comment fails the
// render, and internal packages and commands are left out.
func TestTroubleshootingFindsEveryError(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("newpkg/errors.go", `package newpkg

import "errors"

var (
	// ErrNew reports something new. Do the new thing.
	ErrNew = errors.New("new thing")
	errQuiet = errors.New("unexported")
)

// TroubleError reports trouble; retry.
type TroubleError struct{}

func (*TroubleError) Error() string { return "trouble" }

// Config is not an error.
type Config struct{}
`)
	write("newpkg/errors_test.go", "package newpkg\n\nimport \"errors\"\n\n// ErrTest is a test's.\nvar ErrTest = errors.New(\"test\")\n")
	write("internal/hidden/h.go", "package hidden\n\nimport \"errors\"\n\n// ErrHidden is internal.\nvar ErrHidden = errors.New(\"hidden\")\n")
	write("cmd/tool/main.go", "package main\n\nimport \"errors\"\n\n// ErrTool is a command's.\nvar ErrTool = errors.New(\"tool\")\n\nfunc main() {}\n")
	errs, err := Errors(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range errs {
		names = append(names, e.Pkg+"."+e.Name)
	}
	if strings.Join(names, " ") != "newpkg.ErrNew newpkg.TroubleError" {
		t.Fatalf("errors found: %v, want newpkg.ErrNew newpkg.TroubleError", names)
	}
	page, err := Troubleshooting(errs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### `newpkg.ErrNew`\n\nMessage: `new thing`\n\nErrNew reports something new. Do the new thing.\n",
		"### `*newpkg.TroubleError`\n\nTroubleError reports trouble; retry.\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	write("newpkg/more.go", "package newpkg\n\nimport \"errors\"\n\nvar ErrUndocumented = errors.New(\"what now\")\n")
	errs, err = Errors(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Troubleshooting(errs); err == nil || !strings.Contains(err.Error(), "newpkg.ErrUndocumented") {
		t.Fatalf("an undocumented error renders with err = %v, want it named", err)
	}
}
