package docscheck

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// TroubleshootingPage is where [Troubleshooting] is written, relative to
// the module's root.
const TroubleshootingPage = "docs/troubleshooting.md"

// Module is the module's path.
const Module = "github.com/shardkit/shardkit"

// ErrorDoc is one exported error of a library package: a sentinel (a
// package-level variable named Err…) or a type with an Error method.
type ErrorDoc struct {
	Pkg     string // import path relative to the module, "plugin/telemetry"
	Name    string // ErrMissingShardKey, ShardError
	Type    bool   // an error type, not a sentinel
	Message string // a sentinel's text when it is a literal of errors.New or fmt.Errorf
	Doc     string // its doc comment: what it reports and what to do
}

// libraryDir reports whether the directory rel (slash-separated, relative
// to the module) holds a package users import: not internal, not a
// command, an example or test data.
func libraryDir(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		switch part {
		case "internal", "cmd", "examples", "testdata", "docker", "api", "docs":
			return false
		}
		if strings.HasPrefix(part, ".") || strings.HasPrefix(part, "_") {
			return false
		}
	}
	return true
}

// Errors returns every exported error of the library's packages under
// root, by package and name.
func Errors(root string) ([]ErrorDoc, error) {
	var out []ErrorDoc
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if !libraryDir(rel) {
			return filepath.SkipDir
		}
		errs, err := packageErrors(path, rel)
		out = append(out, errs...)
		return err
	})
	slices.SortFunc(out, func(a, b ErrorDoc) int {
		return strings.Compare(a.Pkg+"."+a.Name, b.Pkg+"."+b.Name)
	})
	return out, err
}

// packageErrors returns the exported errors of the package in dir.
func packageErrors(dir, rel string) ([]ErrorDoc, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File // of the package, whatever their build tags
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if f.Name.Name != "main" {
			files = append(files, f)
		}
	}
	var out []ErrorDoc
	seen := map[string]bool{}     // a name declared in files of different build tags is one error
	errTypes := map[string]bool{} // types with an Error() string method
	inner := internalErrors(dir, rel, files)
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "Error" || len(fn.Type.Params.List) != 0 ||
				fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "string" {
				continue
			}
			t := fn.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if id, ok := t.(*ast.Ident); ok && id.IsExported() {
				errTypes[id.Name] = true
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				docOf := func(own *ast.CommentGroup) string {
					if own == nil && len(g.Specs) == 1 {
						own = g.Doc
					}
					return strings.TrimSpace(own.Text())
				}
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if t, ok := inner[selector(s.Type)]; ok && s.Assign.IsValid() && t.Type && s.Name.IsExported() {
						errTypes[s.Name.Name] = true // an alias of an internal error type
					}
					if errTypes[s.Name.Name] && !seen[s.Name.Name] {
						seen[s.Name.Name] = true
						out = append(out, ErrorDoc{Pkg: rel, Name: s.Name.Name, Type: true, Doc: docOf(s.Doc)})
					}
				case *ast.ValueSpec:
					if g.Tok != token.VAR {
						continue
					}
					for i, n := range s.Names {
						if !n.IsExported() || !strings.HasPrefix(n.Name, "Err") || seen[n.Name] {
							continue
						}
						seen[n.Name] = true
						e := ErrorDoc{Pkg: rel, Name: n.Name, Doc: docOf(s.Doc)}
						if i < len(s.Values) {
							e.Message = literalMessage(s.Values[i])
							if t, ok := inner[selector(s.Values[i])]; ok && !t.Type {
								e.Message = t.Message // internal.ErrX: its text is there
							}
						}
						out = append(out, e)
					}
				}
			}
		}
	}
	return out, nil
}

// selector returns "path.Name" for an expression pkg.Name, "" for any
// other.
func selector(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return x.Name + "." + sel.Sel.Name
}

// internalErrors returns the errors of the module's internal packages that
// files import, by "name.Err…" as the files refer to them: a library
// package that exports an internal package's error under its own name
// (var ErrX = shardschema.ErrX, type ShardError = shardschema.ShardError)
// exports that error, whose message and type are declared there.
func internalErrors(dir, rel string, files []*ast.File) map[string]ErrorDoc {
	root := filepath.Clean(strings.TrimSuffix(filepath.ToSlash(dir), rel))
	out := map[string]ErrorDoc{}
	for _, f := range files {
		for _, im := range f.Imports {
			path, err := strconv.Unquote(im.Path.Value)
			if err != nil || !strings.HasPrefix(path, Module+"/internal/") {
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			innerRel := strings.TrimPrefix(path, Module+"/")
			errs, err := packageErrors(filepath.Join(root, filepath.FromSlash(innerRel)), innerRel)
			if err != nil {
				continue
			}
			for _, e := range errs {
				out[name+"."+e.Name] = e
			}
		}
	}
	return out
}

// literalMessage returns the text of errors.New("…") or
// fmt.Errorf("…", …), "" for any other value.
func literalMessage(e ast.Expr) string {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return ""
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
		return ""
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

// Troubleshooting renders the page of every exported error: what it
// reports and what to do, from its doc comment. A missing doc comment is
// an error: each error must say its cause and its fix.
func Troubleshooting(errs []ErrorDoc) (string, error) {
	var b strings.Builder
	b.WriteString(`# Troubleshooting

<!-- Generated by go run ./internal/harness/docscheck/troubleshooting from the doc comments of
the exported errors; edit those comments, not this page. -->

Every error shardkit's packages export, by package: what it reports and what to do. Each is
tested with ` + "`errors.Is`" + ` (a sentinel, ` + "`ErrX`" + `) or ` + "`errors.As`" + ` (a type, ` + "`*XError`" + `);
most sentinels arrive wrapped in a type that names the shard and server. A message is the
sentinel's own text, which the error you see starts with or contains. The words are
in the [glossary](concepts.md); ` + "`shardctl`" + ` prints a hint after the errors an operator
meets most.

`)
	var missing []string
	pkg := ""
	var index []string
	for _, e := range errs {
		if e.Pkg != pkg {
			pkg = e.Pkg
			index = append(index, fmt.Sprintf("[%s](#%s)", pkg, strings.ReplaceAll(pkg, "/", "")))
		}
	}
	b.WriteString("Packages: " + strings.Join(index, " · ") + ".\n")
	pkg = ""
	for _, e := range errs {
		if e.Pkg != pkg {
			pkg = e.Pkg
			fmt.Fprintf(&b, "\n## %s\n", pkg)
		}
		base := pkg[strings.LastIndex(pkg, "/")+1:]
		name := base + "." + e.Name
		if e.Type {
			name = "*" + name
		}
		fmt.Fprintf(&b, "\n### `%s`\n\n", name)
		if e.Message != "" {
			fmt.Fprintf(&b, "Message: `%s`\n\n", strings.ReplaceAll(e.Message, "`", "'"))
		}
		if e.Doc == "" {
			missing = append(missing, e.Pkg+"."+e.Name)
			continue
		}
		b.WriteString(markdown(e.Pkg, e.Doc))
		fmt.Fprintf(&b, "\n[Reference](https://pkg.go.dev/%s/%s#%s).\n", Module, e.Pkg, e.Name)
	}
	if len(missing) > 0 {
		return b.String(), fmt.Errorf("exported errors without a doc comment (say what each reports and what to do): %s", strings.Join(missing, ", "))
	}
	return b.String(), nil
}

// markdown renders a doc comment of package pkg as Markdown, doc links to
// pkg.go.dev, headings below the page's.
func markdown(pkg, text string) string {
	p := comment.Parser{
		LookupPackage: func(name string) (string, bool) {
			return Module + "/" + name, true
		},
		LookupSym: func(recv, name string) bool { return true },
	}
	d := p.Parse(text)
	pr := comment.Printer{
		HeadingLevel:   4,
		DocLinkBaseURL: "https://pkg.go.dev",
		DocLinkURL: func(l *comment.DocLink) string {
			path := l.ImportPath
			if path == "" {
				path = Module + "/" + pkg
			}
			frag := l.Name
			if l.Recv != "" {
				frag = l.Recv + "." + l.Name
			}
			if frag == "" {
				return "https://pkg.go.dev/" + path
			}
			return "https://pkg.go.dev/" + path + "#" + frag
		},
	}
	return string(pr.Markdown(d))
}

// WriteTroubleshooting renders the page from the code under root and
// writes it.
func WriteTroubleshooting(root string) error {
	errs, err := Errors(root)
	if err != nil {
		return err
	}
	page, err := Troubleshooting(errs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, TroubleshootingPage), []byte(page), 0o644)
}
