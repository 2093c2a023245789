package docscheck

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A figure is current while the code it measures is the code its result
// file was taken on. make figures writes, as the result file's first line,
// "code: HASH PACKAGES": a hash of the non-test Go files of the packages the
// figure's command names (and Measures adds). When the code changes, the
// table is rendered with a line that says it was not re-taken since, and
// TestFiguresMatchResults fails until the page is re-rendered or the figure
// re-measured: a change of a default cannot leave the manual behind silently.

// packageRE finds the package paths a command names: ./plugin, ./rebalance/,
// ./examples/photos/... .
var packageRE = regexp.MustCompile(`(?:^|[\s'"])(\./[A-Za-z0-9_./-]*)`)

// Packages returns the module directories whose code the figure measures,
// as "./dir" or "./dir/..." (the directory and everything under it), sorted.
// A figure read From another's result file measures that figure's packages.
func (fig Figure) Packages() []string {
	if fig.From != "" {
		for _, f := range Figures {
			if f.Name == fig.From {
				return f.Packages()
			}
		}
	}
	var pkgs []string
	for _, m := range packageRE.FindAllStringSubmatch(fig.Command, -1) {
		p := strings.TrimSuffix(m[1], "/")
		if p == "." || p == "" {
			continue
		}
		pkgs = append(pkgs, p)
	}
	pkgs = append(pkgs, fig.Measures...)
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// CodeHash hashes the non-test Go files of pkgs (as Packages returns them)
// under root: their paths relative to root and their contents.
func CodeHash(root string, pkgs []string) (string, error) {
	var files []string
	for _, p := range pkgs {
		dir, all := strings.CutSuffix(p, "/...")
		dir = filepath.Join(root, filepath.FromSlash(dir))
		if !all {
			entries, err := os.ReadDir(dir)
			if err != nil {
				return "", fmt.Errorf("package %s: %v", p, err)
			}
			for _, e := range entries {
				if !e.IsDir() && measuredFile(e.Name()) {
					files = append(files, filepath.Join(dir, e.Name()))
				}
			}
			continue
		}
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && path != dir && (e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".")) {
				return filepath.SkipDir
			}
			if !e.IsDir() && measuredFile(e.Name()) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("package %s: %v", p, err)
		}
	}
	if len(files) == 0 {
		return "", fmt.Errorf("packages %v hold no Go files", pkgs)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	h := sha256.New()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(root, f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(src))
		h.Write(src)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func measuredFile(name string) bool {
	return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
}

// CodeLine is the result file's first line for code hashed as hash.
func CodeLine(hash string, pkgs []string) string {
	return fmt.Sprintf("code: %s %s", hash, strings.Join(pkgs, " "))
}

// Stale reports whether res was taken on other code than the figure's
// packages under root hold now; a result file without a code line is stale.
func (fig Figure) Stale(res *Results, root string) (bool, error) {
	now, err := CodeHash(root, fig.Packages())
	if err != nil {
		return false, fmt.Errorf("figure %s: %v", fig.Name, err)
	}
	taken, _, _ := strings.Cut(res.Config["code"], " ")
	return taken != now, nil
}
