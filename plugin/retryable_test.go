package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// serverErrors are real errors of a server and of the driver, each
// produced on a live cluster (or a port nothing listens on), by name.
func serverErrors(t *testing.T, dsn string) map[string]error {
	t.Helper()
	ctx := context.Background()
	out := map[string]error{}
	run := func(name string, sqls ...string) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, s := range sqls {
			if _, err = conn.Exec(ctx, s); err != nil {
				break
			}
		}
		if err == nil {
			t.Fatalf("%s: %v ran without an error", name, sqls)
		}
		out[name] = err
		if name == "57P01 admin_shutdown" {
			_, out["conn closed"] = conn.Exec(ctx, "SELECT 1")
		}
	}
	run("42601 syntax", "SELEC 1")
	run("23505 unique", "CREATE TEMP TABLE u (a int PRIMARY KEY)", "INSERT INTO u VALUES (1), (1)")
	run("42501 permission", "SET ROLE pg_monitor", "SELECT * FROM pg_authid")
	run("25006 read-only", "BEGIN READ ONLY", "CREATE TABLE ro_refused (a int)")
	run("57014 statement timeout", "SET statement_timeout = 1", "SELECT pg_sleep(5)")
	run("57P01 admin_shutdown", "SELECT pg_terminate_backend(pg_backend_pid())")
	port, err := pglocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, out["connection refused"] = pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port))
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "no_such_database_h56"
	_, out["3D000 unknown database"] = pgx.ConnectConfig(ctx, cfg)
	for name, err := range out {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
	}
	return out
}

// TestRetryableServerErrors: Retryable over the errors a statement can
// meet on a server, as Postgres and pgx produce them and as the plugin
// wraps them: true exactly when running the statement again can
// succeed (the connection or server went away, a read-only server, a
// timeout, a conflict with another transaction), false when it gives
// the same answer (syntax, constraint, permission, configuration).
func TestRetryableServerErrors(t *testing.T) {
	e := newEnv(t, envOpts{one: true, shards: 2})
	real := serverErrors(t, e.dsn["a"])
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "constructed"} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"42601 syntax", real["42601 syntax"], false},
		{"23505 unique", real["23505 unique"], false},
		{"42501 permission", real["42501 permission"], false},
		{"3D000 unknown database", real["3D000 unknown database"], false},
		{"25006 read-only", real["25006 read-only"], true},
		{"57014 statement timeout", real["57014 statement timeout"], true},
		{"57P01 admin_shutdown", real["57P01 admin_shutdown"], true},
		{"conn closed", real["conn closed"], true},
		{"connection refused", real["connection refused"], true},
		{"57P02 crash_shutdown", pg("57P02"), true},
		{"57P03 cannot_connect_now", pg("57P03"), true},
		{"08006 connection_failure", pg("08006"), true},
		{"08001 unable to connect", pg("08001"), true},
		{"40001 serialization_failure", pg("40001"), true},
		{"40P01 deadlock", pg("40P01"), true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"net error", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		{"busy", &BusyError{Server: "a", Err: context.DeadlineExceeded}, true},
		{"the plugin's bound", &ServerError{Server: "a", Err: fmt.Errorf("no answer within 31s: %w", context.DeadlineExceeded)}, true},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"caller's cancel", context.Canceled, false},
		{"config refusal", &ConfigError{Server: "a", Err: real["3D000 unknown database"]}, false},
		{"missing shard key", &ShardError{Shard: -1, Err: ErrMissingShardKey}, false},
		{"check violation", &pgconn.PgError{Code: "23514"}, false},
		{"statement failed, then its rollback", &rollbackError{Err: &ServerError{Server: "a", Err: real["57P01 admin_shutdown"]}, Rollback: real["conn closed"]}, true},
		{"constraint failed, then its rollback", &rollbackError{Err: real["23505 unique"], Rollback: real["conn closed"]}, false},
	}
	// A connection the driver closed under a statement says the server
	// ended it or the network cut it: the server is taken as down (a
	// BEGIN that met it becomes a *ServerError), not as up.
	for _, name := range []string{"conn closed", "57P01 admin_shutdown", "connection refused"} {
		if !unavailable(fmt.Errorf("begin: %w", real[name])) {
			t.Errorf("%s: unavailable = false, want true", name)
		}
	}
	for _, name := range []string{"42601 syntax", "25006 read-only", "3D000 unknown database"} {
		if unavailable(real[name]) {
			t.Errorf("%s: unavailable = true, want false", name)
		}
	}
	for _, c := range cases {
		// As the plugin returns them: bare, and wrapped for the shard a
		// statement (or its BEGIN) was going to.
		for _, err := range []error{c.err, &ShardError{Shard: 1, Server: "a", Table: "photos", Err: fmt.Errorf("begin: %w", c.err)}} {
			if got := Retryable(err); got != c.want {
				t.Errorf("%s: Retryable(%v) = %v, want %v", c.name, err, got, c.want)
			}
		}
	}
}

// suicideTrigger makes an INSERT of a photo captioned 'die' into shard's
// photos terminate its own backend, as a server crash or an operator's
// pg_terminate_backend ends a session mid-statement (57P01).
func suicideTrigger(t *testing.T, e *env, shard int) {
	t.Helper()
	schema := pgx.Identifier{router.SchemaName(shard)}.Sanitize()
	e.rawExec(t, e.serverOf(t, shard), `CREATE FUNCTION `+schema+`.die() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.caption = 'die' THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(30); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER die BEFORE INSERT ON `+schema+`.photos FOR EACH ROW EXECUTE FUNCTION `+schema+`.die()`)
}

// TestBackendKilledIsTyped: a statement whose backend is terminated
// under it, in the transaction GORM opens around it (whose rollback
// then fails too) and in an explicit transaction, fails with a
// *ServerError that Retryable calls true, and running it again succeeds.
func TestBackendKilledIsTyped(t *testing.T) {
	e := newEnv(t, envOpts{shards: 4, cfg: func(c *Config) { c.ServerRetry = 50 * time.Millisecond }})
	const u = 2
	suicideTrigger(t, e, e.shardOf(u))
	check := func(what string, err error) {
		t.Helper()
		var se *ServerError
		if !errors.As(err, &se) || !Retryable(err) {
			t.Fatalf("%s: err = %v (%T); want a *ServerError that Retryable calls true", what, err, err)
		}
		if se.Server != e.serverOf(t, e.shardOf(u)) {
			t.Errorf("%s: the error names server %q, want %q", what, se.Server, e.serverOf(t, e.shardOf(u)))
		}
	}
	err := e.db.Create(&Photo{UserID: u, Caption: "die"}).Error
	check("Create", err)
	// The server is taken as down for ServerRetry; a retry then succeeds.
	testkit.Eventually(t, time.Minute, func() bool {
		return e.db.Create(&Photo{UserID: u, Caption: "again"}).Error == nil
	})

	// An explicit transaction whose backend another session terminates
	// between two statements.
	conn := pgtest.Connect(t, e.dsn[e.serverOf(t, e.shardOf(u))])
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Photo{UserID: u, Caption: "first"}).Error; err != nil {
			return err
		}
		// The transaction's backend: the one session of the server's
		// database inside a transaction.
		var pid int
		if err := conn.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatalf("the transaction's backend: %v", err)
		}
		e.rawExec(t, e.serverOf(t, e.shardOf(u)), "SELECT pg_terminate_backend($1)", pid)
		testkit.Eventually(t, time.Minute, func() bool {
			var n int
			_ = conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
			return n == 0
		})
		return tx.Create(&Photo{UserID: u, Caption: "second"}).Error
	})
	check("Transaction", err)
	var n int64
	testkit.Eventually(t, time.Minute, func() bool {
		return e.db.Model(&Photo{}).Where("user_id = ? AND caption IN ?", u, []string{"first", "second"}).Count(&n).Error == nil
	})
	if n != 0 {
		t.Fatalf("rows of the killed transaction: %d, want none", n)
	}
	if strings.Contains(fmt.Sprint(err), "%!") {
		t.Errorf("error text is malformed: %v", err)
	}
}
