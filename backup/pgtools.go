package backup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/pgdsn"
)

// PGBinEnv names a directory holding pg_dump, pg_restore and psql; it
// wins over the newest /usr/lib/postgresql/*/bin and $PATH.
const PGBinEnv = "SHARDKIT_PG_BIN"

// tool returns the path of a PostgreSQL client program: in dir if given,
// else $SHARDKIT_PG_BIN, else the newest /usr/lib/postgresql/*/bin that has
// it (Debian's layout; pg_dump must be at least the server's version),
// else $PATH.
func tool(dir, name string) (string, error) {
	if dir == "" {
		dir = os.Getenv(PGBinEnv)
	}
	if dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("shardkit: %w: no %s in %s", ErrNoTools, name, dir)
		}
		return p, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("shardkit: %w: %s is not installed; install the PostgreSQL client (Debian: postgresql-client) or set %s", ErrNoTools, name, PGBinEnv)
}

func majorOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// libpqEnv turns a pgx DSN into libpq environment variables for the
// client tools. The DSN is parsed by pgx, not handed over as is: it may
// carry pgx-only settings (statement_cache_capacity, pool_max_conns) that
// libpq refuses, and a password on a command line would show in ps.
// Every host of the DSN is kept, with its target_session_attrs, unless at
// names one of them: then only that one.
func libpqEnv(dsn string, at *pgdsn.HostPort) ([]string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shardkit: server DSN: %w", pgdsn.Scrub(err))
	}
	hosts := pgdsn.Hosts(cfg)
	if at != nil {
		hosts = []pgdsn.HostPort{*at}
	}
	host, port := pgdsn.HostList(hosts)
	env := []string{
		"PGHOST=" + host,
		"PGPORT=" + port,
		"PGDATABASE=" + cfg.Database,
		"PGUSER=" + cfg.User,
		"PGAPPNAME=shardkit-backup",
		"PGCONNECT_TIMEOUT=30",
	}
	if tsa := pgdsn.TargetSessionAttrs(cfg); tsa != "" {
		env = append(env, "PGTARGETSESSIONATTRS="+tsa)
	}
	env = append(env, pgdsn.Env(dsn, cfg)...) // TLS as the DSN says
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	return env, nil
}

// command prepares a client tool run against dsn, keeping the tail of its
// stderr for the error.
func command(ctx context.Context, dir, name, dsn string, args ...string) (*exec.Cmd, *tailBuffer, error) {
	return commandAt(ctx, dir, name, dsn, nil, args...)
}

// commandAt is command against the host at of dsn's hosts (nil: all).
func commandAt(ctx context.Context, dir, name, dsn string, at *pgdsn.HostPort, args ...string) (*exec.Cmd, *tailBuffer, error) {
	path, err := tool(dir, name)
	if err != nil {
		return nil, nil, err
	}
	env, err := libpqEnv(dsn, at)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(cleanEnv(), env...)
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	return cmd, stderr, nil
}

// cleanEnv is the process environment without libpq's own variables, so a
// PGOPTIONS or PGSERVICE of the operator's shell cannot redirect a tool.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if len(kv) >= 2 && kv[:2] == "PG" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
