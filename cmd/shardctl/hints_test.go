package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

func TestHints(t *testing.T) {
	cases := []struct {
		err  error
		want string // in the printed message; "" means no hint
	}{
		{&rebalance.MoveError{Kind: rebalance.ErrStopped, ID: 3, Shard: 12, Step: "copied", Err: errors.New("boom")}, "shardctl move --shard 12 --resume"},
		{&rebalance.MoveError{Kind: rebalance.ErrCutoverAborted, Shard: 12, Err: errors.New("lag gate")}, "retry with `shardctl move --resume`"},
		{&rebalance.MoveError{Kind: rebalance.ErrReverseLost, ID: 3, Shard: 12, Err: errors.New("reverse slot missing")}, "shardctl move --shard 12 --complete"},
		{fmt.Errorf("cutover: %w", rebalance.ErrPreparedTransactions), "shardctl resolve"},
		{fmt.Errorf("shardkit: server pg2 has wal_level replica: %w", rebalance.ErrNotLogical), "shardctl move --offline"},
		{fmt.Errorf("move shard 4: %w", rebalance.ErrMoveInProgress), "shardctl rollback"},
		{fmt.Errorf("load: %w", router.ErrNoCatalog), "shardctl init"},
		{fmt.Errorf("%w: %q", router.ErrUnknownServer, "pg9"), "shardctl init --server"},
		{fmt.Errorf("restore shard 1: %w", backup.ErrNotConfirmed), "--yes"},
		{fmt.Errorf("%w: shard 2 is not active", backup.ErrShardBusy), "shardctl move --complete"},
		{&rebalance.MoveError{Kind: rebalance.ErrPreflight, Shard: 7, Source: "pg1", Target: "pg2", Err: errors.New("server pg1: replica identity: table has no usable replica identity")}, "shardctl move --shard 7 --to pg2 --dry-run"},
		{errors.New("something else"), ""},
	}
	for _, c := range cases {
		got := withHint(c.err)
		if c.want == "" {
			if got != c.err.Error() {
				t.Errorf("%v: hint %q added, want none", c.err, got)
			}
			continue
		}
		if !strings.HasPrefix(got, c.err.Error()) || !strings.Contains(got[len(c.err.Error()):], c.want) {
			t.Errorf("%v: printed %q, want the error followed by a hint with %q", c.err, got, c.want)
		}
	}
}

// TestLibraryErrorsNameNoFlags: the library is used from Go, where there
// are no flags; its error messages name the API, and shardctl adds the
// command line (hint). Every string literal given to errors.New or
// fmt.Errorf in the library's packages is checked.
func TestLibraryErrorsNameNoFlags(t *testing.T) {
	flagLike := regexp.MustCompile(`shardctl|(^|[\s(\x60])--[a-z]`)
	root := filepath.Join("..", "..")
	found := 0
	for _, pkg := range []string{"idgen", "router", "catalog", "plugin", "migrations", "rebalance", "backup"} {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no sources (%v)", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || !(x.Name == "errors" && sel.Sel.Name == "New" || x.Name == "fmt" && sel.Sel.Name == "Errorf") {
					return true
				}
				found++
				for _, a := range call.Args {
					lit, ok := a.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, _ := strconv.Unquote(lit.Value)
					if flagLike.MatchString(s) {
						t.Errorf("%s: error message %q names a shardctl command or flag; name the Go API and let shardctl's hint add the command line", f, s)
					}
				}
				return true
			})
		}
	}
	if found < 50 {
		t.Fatalf("found only %d error constructors: the scan is not reading the library", found)
	}
}
