// Command pgbin prints the directory of one PostgreSQL major version's
// server binaries, as internal/harness/pglocal finds them (Debian's packages,
// else the build of `make postgres`), for `make test-versions`:
//
//	SHARDKIT_PG_BIN=$(go run ./internal/harness/pglocal/cmd/pgbin 17) go test ./plugin
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pgbin MAJOR (e.g. pgbin 17)")
		os.Exit(2)
	}
	major, err := strconv.Atoi(os.Args[1])
	if err != nil || major < 15 {
		fmt.Fprintf(os.Stderr, "pgbin: %q is not a supported major version (15 or later)\n", os.Args[1])
		os.Exit(2)
	}
	dir, err := pglocal.BinDirOf(major)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(dir)
}
