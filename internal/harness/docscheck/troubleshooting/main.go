// Command troubleshooting writes docs/troubleshooting.md from the doc
// comments of every exported error of the library's packages (see
// docscheck.Troubleshooting); the docs check fails when the page differs.
//
//	go run ./internal/harness/docscheck/troubleshooting
//
// Run it from the module's root.
package main

import (
	"fmt"
	"os"

	"github.com/shardkit/shardkit/internal/harness/docscheck"
)

func main() {
	if err := docscheck.WriteTroubleshooting("."); err != nil {
		fmt.Fprintln(os.Stderr, "troubleshooting:", err)
		os.Exit(1)
	}
}
