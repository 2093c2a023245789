// Command figures regenerates the tables of docs/performance.md that
// benchmarks and figure tests measure. With -run it first runs each
// figure's command and keeps its output, Go's benchmark format, as
// docs/figures/NAME.txt (with the load average at the start as a
// configuration line), followed by the lines tests and programs wrote to
// the file SHARDKIT_FIGURES_OUT names (see internal/harness/benchout); then it
// rewrites the text between each figure's markers on the page from those
// files. Figures without a result file are left as they are; a figure whose
// measured code changed since its result file was taken is rendered with a
// line that says so (see docscheck.Figure.Stale).
//
//	go run ./internal/harness/docscheck/figures -run   # make figures
//	go run ./internal/harness/docscheck/figures        # render from the kept files only
//
// Run it from the module's root.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/shardkit/shardkit/internal/harness/docscheck"
)

func main() {
	run := flag.Bool("run", false, "run each figure's command first and keep its output")
	page := flag.String("page", "docs/performance.md", "the page to rewrite")
	dir := flag.String("dir", "docs/figures", "where the result files are kept")
	only := flag.String("only", "", "only this figure (default: all)")
	flag.Parse()
	if err := figures(*run, *page, *dir, *only); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

func figures(run bool, page, dir, only string) error {
	src, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	text := string(src)
	for _, fig := range docscheck.Figures {
		if only != "" && fig.Name != only {
			continue
		}
		file := filepath.Join(dir, fig.Results()+".txt")
		if run && fig.Command != "" {
			if err := measure(fig, file); err != nil {
				return err
			}
		}
		f, err := os.Open(file)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Printf("%s: no %s yet, left as it is\n", fig.Name, file)
			continue
		}
		if err != nil {
			return err
		}
		res, err := docscheck.ParseResults(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %v", file, err)
		}
		stale, err := fig.Stale(res, ".")
		if err != nil {
			return err
		}
		out, err := fig.Render(res, stale)
		if err != nil {
			return err
		}
		if text, err = docscheck.Replace(text, fig.Name, out); err != nil {
			return fmt.Errorf("%s: %v", page, err)
		}
		if stale {
			fmt.Printf("%s: rewritten from %s, marked stale: the code it measures changed since\n", fig.Name, file)
		} else {
			fmt.Printf("%s: rewritten from %s\n", fig.Name, file)
		}
	}
	return os.WriteFile(page, []byte(text), 0o644)
}

// measure runs a figure's command and keeps its output in file, followed
// by what the command's tests wrote to $SHARDKIT_FIGURES_OUT.
func measure(fig docscheck.Figure, file string) error {
	side, err := os.CreateTemp("", "figures-"+fig.Name+"-*.txt")
	if err != nil {
		return err
	}
	side.Close()
	defer os.Remove(side.Name())
	pkgs := fig.Packages()
	hash, err := docscheck.CodeHash(".", pkgs)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	fmt.Fprintln(&out, docscheck.CodeLine(hash, pkgs))
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(l)); len(f) > 0 {
			fmt.Fprintf(&out, "loadavg: %s\n", f[0])
		}
	}
	fmt.Printf("%s: %s\n", fig.Name, fig.Command)
	cmd := exec.Command("sh", "-c", fig.Command)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "SHARDKIT_FIGURES_OUT="+side.Name())
	if err := cmd.Run(); err != nil {
		os.Stdout.Write(out.Bytes())
		return fmt.Errorf("%s: %v", fig.Name, err)
	}
	written, err := os.ReadFile(side.Name())
	if err != nil {
		return err
	}
	out.Write(written)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}
