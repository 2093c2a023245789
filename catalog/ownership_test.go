package catalog

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// createTableRE finds the tables a catalog migration creates.
var createTableRE = regexp.MustCompile(`(?i)\bcreate\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?shardkit\s*\.\s*"?([a-z_][a-z0-9_]*)"?`)

// catalogTables lists the catalog's tables from its own migrations (and
// the bootstrap of its version record), so that a new table is covered
// by the ownership check without anyone remembering to add it.
func catalogTables(t *testing.T) []string {
	t.Helper()
	texts := []string{sqlBootstrap}
	files, err := fs.Glob(catalogSQL, "catalogsql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no catalog migrations embedded: %v", err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(catalogSQL, f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	seen := map[string]bool{}
	for _, s := range texts {
		for _, m := range createTableRE.FindAllStringSubmatch(stripSQLComments(s), -1) {
			seen[strings.ToLower(m[1])] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func stripSQLComments(s string) string {
	return regexp.MustCompile(`--[^\n]*`).ReplaceAllString(s, "")
}

// tableUseRE matches SQL that names one of tables: qualified with the
// shardkit schema anywhere, or bare after a keyword that takes a table.
func tableUseRE(tables []string) *regexp.Regexp {
	alt := strings.Join(tables, "|")
	return regexp.MustCompile(`(?i)(?:\bshardkit\s*\.\s*"?(?:` + alt + `)"?\b)|(?:\b(?:from|join|into|update|table|truncate|copy)\s+(?:only\s+)?"?(?:` + alt + `)"?(?:\s|$|[;,()]))`)
}

// sqlVerbRE tells SQL from other strings that may name shardkit.servers
// (a trace attribute, say).
var sqlVerbRE = regexp.MustCompile(`(?i)\b(select|insert|update|delete|create|alter|drop|truncate|copy|with|lock|from|join|into|table)\b`)

// sqlFindings returns where src (a Go file) has a string literal that
// names a catalog table, or a pgx.Identifier made of one.
func sqlFindings(fset *token.FileSet, f *ast.File, use *regexp.Regexp, tables map[string]bool) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if !sqlVerbRE.MatchString(v) {
				return true // not SQL: a metric or attribute name, a message
			}
			if m := use.FindString(v); m != "" {
				out = append(out, fset.Position(n.Pos()).String()+": "+strings.TrimSpace(m))
			}
		case *ast.CompositeLit:
			sel, ok := n.Type.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Identifier" {
				return true
			}
			for _, e := range n.Elts {
				if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil && tables[strings.ToLower(v)] {
						out = append(out, fset.Position(lit.Pos()).String()+": identifier "+v)
					}
				}
			}
		}
		return true
	})
	return out
}

// TestOnlyCatalogNamesCatalogTables: outside package catalog (and
// internal/catalogmove, its part for moves), no non-test
// Go file and no SQL file of the module names a catalog table in SQL. The
// catalog's tables have one owner, whose typed operations everything else
// goes through (DESIGN: one owner per catalog table).
func TestOnlyCatalogNamesCatalogTables(t *testing.T) {
	tables := catalogTables(t)
	for _, want := range []string{"config", "servers", "shard_map", "slot_leases", "shard_sql", "moves", "catalog_version"} {
		if !sort.StringsAreSorted(tables) || sort.SearchStrings(tables, want) == len(tables) || tables[sort.SearchStrings(tables, want)] != want {
			t.Fatalf("catalog tables %v: %s is missing; the migrations' CREATE TABLE parse is broken", tables, want)
		}
	}
	isTable := map[string]bool{}
	for _, n := range tables {
		isTable[n] = true
	}
	use := tableUseRE(tables)

	// The scanner itself must see what it is there to see.
	const probe = "package p\nimport \"github.com/jackc/pgx/v5\"\nconst q = `UPDATE shardkit.shard_map SET state = 'active'`\n" +
		"var r = \"select 1 from moves where id = $1\"\nvar i = pgx.Identifier{\"shardkit\", \"slot_leases\"}\nvar ok = \"shardkit.servers_total\"\nvar attr = \"shardkit.servers\"\n"
	fset := token.NewFileSet()
	pf, err := parser.ParseFile(fset, "probe.go", probe, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := sqlFindings(fset, pf, use, isTable); len(got) != 3 {
		t.Fatalf("the scanner found %d uses in the probe, want 3: %q", len(got), got)
	}

	root := testkit.ModuleRoot(t)
	var bad []string
	scanned := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "catalog" || rel == filepath.Join("internal", "catalogmove") || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			scanned++
			for _, b := range sqlFindings(fset, f, use, isTable) {
				bad = append(bad, strings.TrimPrefix(b, root+string(filepath.Separator)))
			}
		case strings.HasSuffix(path, ".sql"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			scanned++
			if m := use.FindString(stripSQLComments(string(b))); m != "" {
				bad = append(bad, rel+": "+strings.TrimSpace(m))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 50 {
		t.Fatalf("scanned only %d files under %s", scanned, root)
	}
	if len(bad) > 0 {
		t.Fatalf("SQL outside package catalog names catalog tables %v; add a typed operation to package catalog and call it instead:\n  %s",
			tables, strings.Join(bad, "\n  "))
	}
}
