package pgbouncer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
)

// builtVersion is the PgBouncer that build-pgbouncer.sh (run by make
// postgres) builds when no PgBouncer 1.21 or later is installed.
const builtVersion = "1.24.1"

// ErrNoPreparedPgBouncer reports that no PgBouncer 1.21 or later (the
// first to carry protocol-level prepared statements in transaction mode)
// was found.
var ErrNoPreparedPgBouncer = errors.New("pgbouncer: no PgBouncer 1.21 or later (max_prepared_statements) was found; " +
	"make postgres builds one (internal/harness/pgbouncer/build-pgbouncer.sh), or set SHARDKIT_PGBOUNCER_PREPARED to one")

// PreparedBinary finds a PgBouncer that carries prepared statements
// (1.21 or later): $SHARDKIT_PGBOUNCER_PREPARED, else the one make
// postgres built, else Binary's when it is recent enough.
func PreparedBinary() (string, error) {
	env := os.Getenv("SHARDKIT_PGBOUNCER_PREPARED")
	if env != "" && env != "none" {
		if !carriesPrepared(env) {
			return "", fmt.Errorf("%w (SHARDKIT_PGBOUNCER_PREPARED=%s is not one)", ErrNoPreparedPgBouncer, env)
		}
		return env, nil
	}
	var candidates []string
	if env != "none" {
		candidates = builtPaths()
	}
	if bin, err := Binary(); err == nil {
		candidates = append(candidates, bin)
	}
	for _, bin := range candidates {
		if carriesPrepared(bin) {
			return bin, nil
		}
	}
	return "", ErrNoPreparedPgBouncer
}

// builtPaths are where build-pgbouncer.sh installs: /var/cache when run
// as root (PgBouncer then runs as postgres, who cannot enter /root), the
// user's cache directory otherwise.
func builtPaths() []string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	rel := filepath.Join("shardkit", "pgbouncer-"+builtVersion, "bin", "pgbouncer")
	paths := []string{filepath.Join("/var/cache", rel)}
	if cache != "" {
		paths = append(paths, filepath.Join(cache, rel))
	}
	return paths
}

// carriesPrepared reports whether bin is a PgBouncer 1.21 or later.
func carriesPrepared(bin string) bool {
	major, minor, ok := version(bin)
	return ok && (major > 1 || major == 1 && minor >= 21)
}

var (
	versionRE = regexp.MustCompile(`^PgBouncer (\d+)\.(\d+)`)
	versions  sync.Map // bin → [2]int, or nil when it did not say
)

// version runs bin --version once per process.
func version(bin string) (major, minor int, ok bool) {
	if v, seen := versions.Load(bin); seen {
		mm, ok := v.([2]int)
		return mm[0], mm[1], ok
	}
	out, err := exec.Command(bin, "--version").Output()
	m := versionRE.FindSubmatch(out)
	if err != nil || m == nil {
		versions.Store(bin, nil)
		return 0, 0, false
	}
	major, _ = strconv.Atoi(string(m[1]))
	minor, _ = strconv.Atoi(string(m[2]))
	versions.Store(bin, [2]int{major, minor})
	return major, minor, true
}
