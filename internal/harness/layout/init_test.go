package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// initFuncs returns, for the library's non-test Go files under root, each
// func init: a package of the library wires nothing at load time. A
// package that needs another's unexported state gets it through a typed
// call that points down the import graph (catalog.Catalog.Moves hands
// internal/catalogmove its store), never through a registration whose
// absence panics at run time in a program that did not import the
// registering package. cmd/, examples/ and internal/harness are programs
// and tools, not the library: their inits stay theirs.
func initFuncs(t *testing.T, root string) (found []string, files int) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || base == "testdata" ||
				rel == "cmd" || rel == "examples" || rel == "internal/harness" || rel == "docs" || rel == "api" || rel == "docker") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "init" {
				found = append(found, fmt.Sprintf("%s:%d", rel, fset.Position(fn.Pos()).Line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found, files
}

func TestLibraryHasNoInit(t *testing.T) {
	found, files := initFuncs(t, filepath.Join("..", "..", ".."))
	if files < 100 {
		t.Fatalf("found %d library Go files; expected the module's", files)
	}
	for _, f := range found {
		t.Errorf("%s: func init in the library; hand what another package needs over through a typed call that points down the import graph (a method or constructor), not a registration at load time", f)
	}
}

func TestInitFuncsCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("catalog/catalog.go", "package catalog\n\nimport \"x/internal/catalogmove\"\n\nfunc init() { catalogmove.Register(nil, nil) }\n")
	write("catalog/other.go", "package catalog\n\ntype T struct{}\n\nfunc (T) init() {}\n")
	write("catalog/catalog_test.go", "package catalog\n\nfunc init() {}\n")
	write("cmd/shardctl/main.go", "package main\n\nfunc init() {}\n")
	write("internal/harness/docscheck/x.go", "package docscheck\n\nfunc init() {}\n")
	write("internal/shardschema/doc.go", "package shardschema\n\nfunc init() {}\n")
	found, files := initFuncs(t, dir)
	if files != 3 || len(found) != 2 || found[0] != "catalog/catalog.go:5" || found[1] != "internal/shardschema/doc.go:3" {
		t.Errorf("got %d files, inits %q; want 3 library files and the inits of catalog/catalog.go and internal/shardschema/doc.go", files, found)
	}
}
