// Package pgbouncer starts a throwaway PgBouncer in front of a Postgres
// server, for tests and the demo:
//
//	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Port: cluster.Port})
//	if err != nil { ... }
//	defer b.Stop()
//	dsn := b.DSN("mydb") // through the pooler, transaction pool mode
//
// Each PgBouncer gets its own temp directory, a free TCP port on
// 127.0.0.1, pool_mode=transaction unless told otherwise, and an
// auth_file listing the users it lets in. With no Users, only postgres is
// listed and auth_type is trust, as internal/harness/pglocal's clusters trust the
// postgres user; with Users, auth_type is md5 and clients must give the
// listed password (PgBouncer passes it on to the server, which trusts it).
// When the caller is root, PgBouncer runs as the postgres OS user (it
// refuses root).
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

// ErrNoPgBouncer reports that no pgbouncer binary was found.
var ErrNoPgBouncer = errors.New("pgbouncer: the pgbouncer binary was not found; " +
	"install it (Debian/Ubuntu: apt-get install pgbouncer, or make postgres) or set SHARDKIT_PGBOUNCER to its path")

// Options configure Start. Only Port is required.
type Options struct {
	// Host and Port are the Postgres server's address. Empty Host means
	// 127.0.0.1.
	Host string
	Port int
	// PoolMode is PgBouncer's pool_mode. Empty means transaction.
	PoolMode string
	// Users are the users PgBouncer lets in, with their passwords. Nil
	// means postgres alone with trust authentication; otherwise clients
	// authenticate with md5 against these passwords.
	Users map[string]string
	// Databases are the databases PgBouncer serves, each on the server
	// under the same name. Nil means any (the "*" fallback entry); a
	// client asking for a database not listed is refused with "no such
	// database".
	Databases []string
	// Settings are extra [pgbouncer] lines (name → value), applied after
	// the defaults (for example default_pool_size or
	// ignore_startup_parameters).
	Settings map[string]string
	// PreparedStatements is max_prepared_statements: above zero,
	// PgBouncer carries protocol-level prepared statements in transaction
	// mode, which needs PgBouncer 1.21 or later (PreparedBinary; Start
	// fails with ErrNoPreparedPgBouncer without one). Zero means it does
	// not, as PgBouncer 1.18 (Binary's, Debian 12's) does not.
	PreparedStatements int
}

// Bouncer is one running PgBouncer.
type Bouncer struct {
	Port int
	Dir  string // config, auth file and log
	opts Options
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	stop bool

	prepared bool // the binary has max_prepared_statements (1.21 or later)
}

// Binary finds pgbouncer: $SHARDKIT_PGBOUNCER, else /usr/sbin/pgbouncer
// (Debian's package), else pgbouncer on $PATH.
func Binary() (string, error) {
	if p := os.Getenv("SHARDKIT_PGBOUNCER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w (SHARDKIT_PGBOUNCER=%s: %v)", ErrNoPgBouncer, p, err)
		}
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	return "", ErrNoPgBouncer
}

// Start writes a configuration and starts PgBouncer, waiting until it
// accepts connections. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Bouncer, error) {
	if opts.Port == 0 {
		return nil, errors.New("pgbouncer: Options.Port (the Postgres server's port) is required")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	find := Binary
	if opts.PreparedStatements > 0 {
		find = PreparedBinary
	}
	bin, err := find()
	if err != nil {
		return nil, err
	}
	cred, err := pglocal.PostgresUser("PgBouncer")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shardkit-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: temp dir: %w", err)
	}
	b := &Bouncer{Dir: dir, opts: opts, cred: cred, prepared: carriesPrepared(bin)}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if b.Port, err = pglocal.FreePort(); err != nil {
			break
		}
		if lastErr = b.start(ctx, bin); lastErr == nil {
			return b, nil
		}
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		if !strings.Contains(string(log), "in use") {
			break // only a port taken in between is worth another try
		}
	}
	_ = os.RemoveAll(dir)
	if lastErr == nil {
		lastErr = err
	}
	return nil, lastErr
}

func (b *Bouncer) start(ctx context.Context, bin string) error {
	if err := b.writeConfig(); err != nil {
		return err
	}
	ini := filepath.Join(b.Dir, "pgbouncer.ini")
	cmd := exec.Command(bin, ini)
	if b.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start %s: %w", bin, err)
	}
	b.cmd, b.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.done) }()
	// Ready when it accepts a TCP connection; gone if it exited.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
			return fmt.Errorf("pgbouncer: exited at start: %s", strings.TrimSpace(lastLines(string(log), 5)))
		case <-ctx.Done():
			b.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // poll: the condition is the port accepting
		}
		if time.Now().After(deadline) {
			b.kill()
			return fmt.Errorf("pgbouncer: not accepting connections on %s after 30s", b.addr())
		}
	}
}

func (b *Bouncer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)) }

func (b *Bouncer) writeConfig() error {
	auth := "trust"
	users := b.opts.Users
	if users == nil {
		users = map[string]string{"postgres": ""}
	} else {
		auth = "md5"
	}
	conf := map[string]string{
		"listen_addr":     "127.0.0.1",
		"listen_port":     strconv.Itoa(b.Port),
		"unix_socket_dir": "",
		"auth_type":       auth,
		"auth_file":       filepath.Join(b.Dir, "userlist.txt"),
		"pool_mode":       b.opts.PoolMode,
		"max_client_conn": "1000",
		// Enough server connections per database and user for the tests'
		// pools to run concurrently without queueing behind each other.
		"default_pool_size":  "20",
		"logfile":            filepath.Join(b.Dir, "pgbouncer.log"),
		"pidfile":            filepath.Join(b.Dir, "pgbouncer.pid"),
		"admin_users":        "postgres",
		"log_connections":    "0",
		"log_disconnections": "0",
	}
	if b.prepared {
		// Set even when zero: PgBouncer 1.22 and later carry 200 of
		// them unless told otherwise.
		conf["max_prepared_statements"] = strconv.Itoa(b.opts.PreparedStatements)
	}
	for k, v := range b.opts.Settings {
		conf[k] = v
	}
	var s strings.Builder
	// "*" is the fallback database: any database name the client asks
	// for, on the upstream server under the same name.
	s.WriteString("[databases]\n")
	dbs := b.opts.Databases
	if dbs == nil {
		dbs = []string{"*"}
	}
	for _, db := range dbs {
		fmt.Fprintf(&s, "%s = host=%s port=%d", db, b.opts.Host, b.opts.Port)
		if db != "*" {
			fmt.Fprintf(&s, " dbname=%s", db)
		}
		s.WriteString("\n")
	}
	s.WriteString("\n[pgbouncer]\n")
	s.WriteString(pglocal.ConfLines(conf))
	if err := b.writeFile("pgbouncer.ini", s.String()); err != nil {
		return err
	}
	return b.writeUsers(users)
}

func (b *Bouncer) writeUsers(users map[string]string) error {
	var s strings.Builder
	for _, u := range slices.Sorted(maps.Keys(users)) {
		fmt.Fprintf(&s, "%q %q\n", u, users[u])
	}
	return b.writeFile("userlist.txt", s.String())
}

func (b *Bouncer) writeFile(name, content string) error {
	if b.cred != nil {
		if err := os.Chown(b.Dir, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			return fmt.Errorf("pgbouncer: chown %s: %w", b.Dir, err)
		}
	}
	path := filepath.Join(b.Dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgbouncer: write %s: %w", path, err)
	}
	if b.cred != nil {
		if err := os.Chown(path, int(b.cred.Uid), int(b.cred.Gid)); err != nil {
			return fmt.Errorf("pgbouncer: chown %s: %w", path, err)
		}
	}
	return nil
}

// DSN returns a connection URL for a database through the pooler, as the
// postgres user (with its password when Options.Users lists one).
func (b *Bouncer) DSN(db string) string {
	return b.UserDSN("postgres", b.opts.Users["postgres"], db)
}

// UserDSN returns a connection URL for a database through the pooler as
// the given user and password ("" for none).
func (b *Bouncer) UserDSN(user, password, db string) string {
	u := url.URL{Scheme: "postgres", Host: b.addr(), Path: "/" + db, RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// SetUsers rewrites the auth file with these users and passwords and
// makes PgBouncer reload it (SIGHUP). The reload is asynchronous: wait
// for the condition the change brings about.
func (b *Bouncer) SetUsers(users map[string]string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop {
		return errors.New("pgbouncer: stopped")
	}
	b.opts.Users = users
	path := filepath.Join(b.Dir, "userlist.txt")
	before, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := b.writeUsers(users); err != nil {
		return err
	}
	// PgBouncer rereads the auth file on reload only when its mtime (in
	// whole seconds) or size changed: a password of the same length
	// written within the same second would go unnoticed.
	if after, err := os.Stat(path); err == nil && after.ModTime().Unix() <= before.ModTime().Unix() {
		t := before.ModTime().Add(time.Second)
		if err := os.Chtimes(path, t, t); err != nil {
			return err
		}
	}
	return b.cmd.Process.Signal(syscall.SIGHUP)
}

// Log returns PgBouncer's log so far, for a failing test's report.
func (b *Bouncer) Log() string {
	log, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	return string(log)
}

// Stop ends PgBouncer (immediate shutdown: its clients are throwaway) and
// removes its directory. It is safe to call twice.
func (b *Bouncer) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop {
		return
	}
	b.stop = true
	b.kill()
	_ = os.RemoveAll(b.Dir)
}

func (b *Bouncer) kill() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
