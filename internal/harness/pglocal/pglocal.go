// Package pglocal starts throwaway PostgreSQL clusters from the installed
// server binaries, for tests and the demo.
//
//	set, err := pglocal.Start(ctx, pglocal.Options{N: 2})
//	if err != nil { ... }
//	defer set.Stop()
//	dsn := set.Clusters[0].DSN("postgres")
//
// Each cluster gets its own temp directory and a free TCP port on 127.0.0.1,
// trust authentication for the postgres user, and wal_level=logical with
// room for replication slots, so shard moves can be tested. When the caller
// is root, the server runs as the postgres OS user (Postgres refuses root).
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoPostgres reports that no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("pglocal: PostgreSQL server binaries (initdb, pg_ctl) not found; " +
	"install them (Debian/Ubuntu: apt-get install postgresql) or set SHARDKIT_PG_BIN to their directory")

// Options configure Start. The zero value starts one cluster.
type Options struct {
	N int // clusters to start; 0 means 1
	// Settings are extra postgresql.conf lines (name → value), applied after the defaults.
	Settings map[string]string
	// Durable keeps fsync and synchronous_commit on. The zero value turns them
	// off: throwaway clusters do not need crash safety, and tests run faster.
	Durable bool
	// Version is the server's major version (15, 17, 18). Zero means the
	// binaries BinDir finds: $SHARDKIT_PG_BIN, else the newest installed.
	// A version that is neither installed nor built by `make postgres` is
	// an error (ErrNoPostgres), never another version.
	Version int
	// Env are extra "NAME=value" variables of the server's environment
	// (LANGUAGE=de with lc_messages = 'C.UTF-8' makes a server that
	// answers in German without a generated locale). Restart keeps them.
	Env []string
}

// Cluster is one running PostgreSQL server.
type Cluster struct {
	Port int
	Dir  string // data directory
	bin  string
	cred *syscall.Credential
	env  []string // Options.Env
	mu   sync.Mutex
	down bool
}

// DSN returns a connection URL for a database on the cluster, as the postgres superuser.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Set is a group of clusters started together.
type Set struct {
	Clusters []*Cluster
	root     string
	bin      string
}

// BinDir finds the PostgreSQL server binaries: $SHARDKIT_PG_BIN, else the
// newest /usr/lib/postgresql/*/bin, else the directory of pg_ctl on $PATH.
func BinDir() (string, error) {
	if d := os.Getenv("SHARDKIT_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			return "", fmt.Errorf("%w (SHARDKIT_PG_BIN=%s has no initdb)", ErrNoPostgres, d)
		}
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// CacheDir is where `make postgres` keeps the servers and poolers it
// builds (build-postgres.sh, build-pgbouncer.sh): /var/cache/shardkit as
// root (the servers then run as the postgres user, who cannot enter
// /root), else $XDG_CACHE_HOME/shardkit or ~/.cache/shardkit.
func CacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/shardkit"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "shardkit")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "shardkit")
}

// BinDirOf finds the server binaries of one major version: Debian's
// /usr/lib/postgresql/MAJOR/bin, else the build of `make postgres` in
// CacheDir.
func BinDirOf(major int) (string, error) {
	for _, d := range []string{
		filepath.Join("/usr/lib/postgresql", strconv.Itoa(major), "bin"),
		filepath.Join(CacheDir(), "postgresql-"+strconv.Itoa(major), "bin"),
	} {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (version %d: neither /usr/lib/postgresql/%d/bin nor %s/postgresql-%d/bin; "+
		"`make postgres` builds it, or SHARDKIT_PG_VERSIONS=%d ./internal/harness/pglocal/build-postgres.sh)",
		ErrNoPostgres, major, major, CacheDir(), major, major)
}

// binFor is the binaries Start uses for opts.
func binFor(opts Options) (string, error) {
	if opts.Version != 0 {
		return BinDirOf(opts.Version)
	}
	return BinDir()
}

// Start initialises and starts opts.N clusters. On error, whatever was
// started is stopped and removed.
func Start(ctx context.Context, opts Options) (*Set, error) {
	if opts.N <= 0 {
		opts.N = 1
	}
	bin, err := binFor(opts)
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dataRoot(opts), "shardkit-pg-")
	if err != nil {
		return nil, fmt.Errorf("pglocal: temp dir: %w", err)
	}
	set := &Set{root: root, bin: bin}
	if err := chownTree(root, cred); err != nil {
		set.Stop()
		return nil, err
	}
	// initdb once, then copy the directory: copying is much faster than
	// running initdb for each cluster. The template stays for Add.
	tmpl := filepath.Join(root, "template")
	if err := run(ctx, cred, filepath.Join(bin, "initdb"), "-D", tmpl, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		set.Stop()
		return nil, fmt.Errorf("pglocal: initdb: %w", err)
	}
	for i := 0; i < opts.N; i++ {
		dir := filepath.Join(root, fmt.Sprintf("pg%d", i))
		if err := run(ctx, cred, "cp", "-a", tmpl, dir); err != nil {
			set.Stop()
			return nil, fmt.Errorf("pglocal: copy template: %w", err)
		}
		c := &Cluster{Dir: dir, bin: bin, cred: cred}
		if err := c.start(ctx, opts); err != nil {
			set.Stop()
			return nil, err
		}
		set.Clusters = append(set.Clusters, c)
	}
	return set, nil

}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		c.Port = port
		if err := c.writeConf(opts); err != nil {
			return err
		}
		c.env = opts.Env
		lastErr = runEnv(ctx, c.cred, c.env, filepath.Join(c.bin, "pg_ctl"), "-D", c.Dir, "-w", "-t", "60",
			"-l", filepath.Join(c.Dir, "server.log"), "start")
		if lastErr == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		if !strings.Contains(string(log), "could not bind") && !strings.Contains(string(log), "in use") {
			break
		}
	}
	return fmt.Errorf("pglocal: start cluster in %s: %w", c.Dir, lastErr)
}

func (c *Cluster) writeConf(opts Options) error {
	conf := map[string]string{
		"listen_addresses":                "'127.0.0.1'",
		"port":                            strconv.Itoa(c.Port),
		"unix_socket_directories":         "'" + c.Dir + "'",
		"wal_level":                       "logical",
		"max_replication_slots":           "40",
		"max_wal_senders":                 "40",
		"max_logical_replication_workers": "16",
		"max_worker_processes":            "24",
		"max_connections":                 "200",
		"shared_buffers":                  "64MB",
		"logging_collector":               "off",
		"log_min_messages":                "warning",
		// Atomic transactions across shards prepare their parts
		// (two-phase commit); PostgreSQL disables that by default.
		"max_prepared_transactions": "64",
	}
	if !opts.Durable {
		conf["fsync"] = "off"
		conf["synchronous_commit"] = "off"
		conf["full_page_writes"] = "off"
	}
	if n := serverFiles(); n > 0 {
		conf["max_files_per_process"] = strconv.Itoa(n)
	}
	for k, v := range opts.Settings {
		conf[k] = v
	}
	path := filepath.Join(c.Dir, "postgresql.auto.conf")
	if err := os.WriteFile(path, []byte(ConfLines(conf)), 0o600); err != nil {
		return fmt.Errorf("pglocal: write %s: %w", path, err)
	}
	return chownTree(path, c.cred)
}

// ConfLines renders settings as "name = value" lines in name order, as
// postgresql.conf and pgbouncer.ini both take them.
func ConfLines(conf map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		fmt.Fprintf(&b, "%s = %s\n", k, conf[k])
	}
	return b.String()
}

// Stop stops the cluster (fast shutdown). It is safe to call twice.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil
	}
	c.down = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return run(ctx, c.cred, filepath.Join(c.bin, "pg_ctl"), "-D", c.Dir, "-m", "fast", "-w", "stop")
}

// Restart starts a cluster that Stop stopped, on the same port and data
// directory, so clients reconnect to the same DSN (tests of outages).
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.down {
		return nil
	}
	if err := runEnv(ctx, c.cred, c.env, filepath.Join(c.bin, "pg_ctl"), "-D", c.Dir, "-w", "-t", "60",
		"-l", filepath.Join(c.Dir, "server.log"), "start"); err != nil {
		return fmt.Errorf("pglocal: restart cluster in %s: %w", c.Dir, err)
	}
	c.down = false
	return nil
}

// KeepEnv, when set in the environment, keeps the clusters' directories
// (data and server.log) after Stop, for reading the server logs of a run
// that failed; Stop prints where they are.
const KeepEnv = "SHARDKIT_PGLOCAL_KEEP"

// Stop stops every cluster and removes the temp directory (unless KeepEnv
// is set).
func (s *Set) Stop() {
	for _, c := range s.Clusters {
		_ = c.Stop()
	}
	if s.root == "" {
		return
	}
	if os.Getenv(KeepEnv) != "" {
		fmt.Fprintf(os.Stderr, "pglocal: %s is set: the clusters' directories stay in %s\n", KeepEnv, s.root)
		return
	}
	_ = os.RemoveAll(s.root)
}

// Add starts one more cluster in the set (for example a new server to
// rebalance onto).
func (s *Set) Add(ctx context.Context, opts Options) (*Cluster, error) {
	bin := s.bin
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.root, fmt.Sprintf("pg%d", len(s.Clusters)))
	if err := run(ctx, cred, "cp", "-a", filepath.Join(s.root, "template"), dir); err != nil {
		return nil, fmt.Errorf("pglocal: copy template: %w", err)
	}
	c := &Cluster{Dir: dir, bin: bin, cred: cred}
	if err := c.start(ctx, opts); err != nil {
		return nil, err
	}
	s.Clusters = append(s.Clusters, c)
	return c, nil
}

// DirEnv names the directory in which Start makes the clusters' directory,
// overriding the choice of dataRoot.
const DirEnv = "SHARDKIT_PG_DIR"

// ramDir is a RAM file system that most Linux machines mount, and
// ramDirFree the room it must have left to hold throwaway clusters.
const (
	ramDir     = "/dev/shm"
	ramDirFree = 6 << 30
)

// dataRoot is where Start makes the clusters' directory: $SHARDKIT_PG_DIR;
// else, for clusters that need not survive a crash, /dev/shm when it has
// room; else the temporary directory. Clusters in RAM cost much less CPU:
// a test's database with thousands of shard schemas is tens of thousands of
// files, and creating, copying and dropping them on a disk file system
// (with its journal, and discard on delete) took about 40% more CPU in the
// kernel than in RAM. Durable clusters stay on disk, where fsync means
// something.
func dataRoot(opts Options) string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	if opts.Durable {
		return ""
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(ramDir, &st); err != nil || st.Bavail*uint64(st.Bsize) < ramDirFree {
		return ""
	}
	if err := syscall.Access(ramDir, 2 /* W_OK */); err != nil {
		return ""
	}
	return ramDir
}

// serverCredential returns the OS user to run the server as.
func serverCredential() (*syscall.Credential, error) { return PostgresUser("PostgreSQL") }

// PostgresUser returns the OS user to run a server program (PostgreSQL,
// PgBouncer) as: nil (the current user) unless we are root, which both
// refuse, then the postgres user.
func PostgresUser(program string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pglocal: running as root, and %s refuses to run as root; "+
			"create a postgres user (the Debian postgresql package does): %w", program, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

func run(ctx context.Context, cred *syscall.Credential, name string, args ...string) error {
	return runEnv(ctx, cred, nil, name, args...)
}

// runEnv is run with env added to the command's environment.
func runEnv(ctx context.Context, cred *syscall.Credential, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	cmd.Env = append(append(os.Environ(), "LC_ALL=C"), env...)
	if cred != nil {
		// The server's own libpq connections (a subscription's) look for
		// client certificates under $HOME/.postgresql: not root's, which
		// the postgres user may not read.
		if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil {
			cmd.Env = append(cmd.Env, "HOME="+u.HomeDir)
		}
	}
	// The server must outlive a cancelled test context only until Stop.
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// maxServerFiles is how many files a cluster's backend may keep open at
// once. A server holding hundreds of shards has thousands of relation
// files (each shard's tables and indexes): past Postgres's default of
// 1000 a backend that reads across the shards closes and reopens them on
// every statement it plans (two system calls per relation), which slows
// cross-shard reads and their first planning.
const maxServerFiles = 16384

var (
	filesOnce  sync.Once
	filesLimit int
)

// serverFiles makes the servers this process starts inherit its soft
// limit on open files (Go raises its own soft limit at start-up but gives
// child processes the original, often 1024, unless the program sets the
// limit itself), and returns the max_files_per_process to configure: 0
// keeps Postgres's default when the limit is not above it.
func serverFiles() int {
	filesOnce.Do(func() {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return
		}
		// Go has raised the soft limit as far as it goes; setting it
		// again is what makes child processes keep it.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return
		}
		// Postgres keeps a few descriptors beyond max_files_per_process.
		const reserve = 64
		if lim.Cur > 1000+reserve {
			filesLimit = int(min(lim.Cur-reserve, maxServerFiles))
		}
	})
	return filesLimit
}
