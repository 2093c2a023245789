package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// pwRole is a role of the test clusters that must give a password (the
// clusters trust every other user), for the wrong-password cases.
const pwRole = "shardkit_pw"

var pwOnce sync.Once

// passwordRole makes cluster i ask pwRole for a password (scram), with
// the password "right", and returns once a wrong password is refused.
func passwordRole(t *testing.T, i int) {
	t.Helper()
	c := pgtest.Cluster(t, i)
	admin := c.DSN("postgres")
	pwOnce.Do(func() {
		pgtest.Exec(t, admin, `DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '`+pwRole+`') THEN CREATE ROLE `+pwRole+` LOGIN SUPERUSER; END IF;
		END $$`)
		hba := filepath.Join(c.Dir, "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(hba)
		if err != nil {
			t.Fatal(err)
		}
		line := "host all " + pwRole + " 127.0.0.1/32 scram-sha-256\n"
		if err := os.WriteFile(hba, append([]byte(line), old...), 0o600); err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if err := os.Chown(hba, int(sys.Uid), int(sys.Gid)); err != nil {
			t.Fatal(err)
		}
		pgtest.Exec(t, admin, `SELECT pg_reload_conf()`)
	})
	pgtest.Exec(t, admin, `ALTER ROLE `+pwRole+` PASSWORD 'right'`)
	u, _ := url.Parse(admin)
	u.User = url.UserPassword(pwRole, "wrong")
	testkit.Until(t, testkit.Wait, func() error {
		conn, err := pgx.Connect(context.Background(), u.String())
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "28P01" {
			return nil
		}
		if err == nil {
			_ = conn.Close(context.Background())
		}
		return fmt.Errorf("cluster %d still lets %s in with a wrong password: %v", i, pwRole, err)
	})
}

// withUser returns a DSN with another user, password and database.
func withUser(dsn, user, password, db string) string {
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(user, password)
	if db != "" {
		u.Path = "/" + db
	}
	return u.String()
}

// TestConfigMistakes gives server b a DSN the server or its pooler
// refuses for a configuration reason, and checks what a caller sees: a
// *ConfigError naming b and the cause, every time (b is not taken as down,
// so its statements are not failed fast), on reads across shards too;
// server a unaffected; and, where the mistake can be put right without
// restarting (a password), b's next statements succeed at once.
func TestConfigMistakes(t *testing.T) {
	cases := []struct {
		name   string
		pooled bool
		auth   map[string]string                             // the pooler's users, nil: trust
		only   bool                                          // the pooler serves b's database alone (no "*" entry)
		bad    func(t *testing.T, direct, app string) string // b's app DSN from its direct and (pooled) app DSN
		cause  string                                        // in the error's text
		fix    func(t *testing.T, b *pgbouncer.Bouncer)      // puts it right, nil when it needs a new DSN
	}{
		{name: "pooler refuses a startup parameter of the DSN", pooled: true,
			bad:   func(_ *testing.T, _, app string) string { return app + "&statement_timeout=5000" },
			cause: "unsupported startup parameter: statement_timeout"},
		{name: "pooler: a database it does not serve", pooled: true, only: true,
			bad:   func(_ *testing.T, _, app string) string { return withUser(app, "postgres", "", "no_such_db") },
			cause: "no such database"},
		{name: "pooler: wrong password", pooled: true, auth: map[string]string{"postgres": "right"},
			bad:   func(_ *testing.T, _, app string) string { return withUser(app, "postgres", "wrong", "") },
			cause: "password authentication failed",
			fix: func(t *testing.T, b *pgbouncer.Bouncer) {
				if err := b.SetUsers(map[string]string{"postgres": "wrong"}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "direct: unknown parameter",
			bad:   func(_ *testing.T, direct, _ string) string { return direct + "&shardkit_no_such_setting=1" },
			cause: "unrecognized configuration parameter"},
		{name: "direct: unknown database",
			bad:   func(_ *testing.T, direct, _ string) string { return withUser(direct, "postgres", "", "no_such_db") },
			cause: "does not exist"},
		{name: "direct: wrong password",
			bad: func(t *testing.T, direct, _ string) string {
				passwordRole(t, 1)
				return withUser(direct, pwRole, "wrong", "")
			},
			cause: "password authentication failed",
			fix: func(t *testing.T, _ *pgbouncer.Bouncer) {
				pgtest.Exec(t, pgtest.Cluster(t, 1).DSN("postgres"), `ALTER ROLE `+pwRole+` PASSWORD 'wrong'`)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bouncer *pgbouncer.Bouncer
			bouncers := map[string]*pgbouncer.Bouncer{}
			if c.pooled {
				needPgBouncer(t)
			}
			e := newEnv(t, envOpts{
				cfg: func(cfg *Config) { cfg.ServerRetry = time.Hour }, // a server taken as down would stay so
				appDSN: func(server, direct string) string {
					if server != "b" {
						return ""
					}
					app := ""
					if c.pooled {
						u, _ := url.Parse(direct)
						opts := pgbouncer.Options{Users: c.auth}
						if c.only {
							opts.Databases = []string{strings.TrimPrefix(u.Path, "/")}
						}
						bouncer = bouncerFor(t, bouncers, direct, opts)
						app = bouncer.DSN(strings.TrimPrefix(u.Path, "/"))
					}
					return c.bad(t, direct, app)
				},
			})
			ub, ua := e.userOn(t, "b", 1), e.userOn(t, "a", 1)
			wantConfig := func(what string, err error) {
				t.Helper()
				var ce *ConfigError
				if !errors.Is(err, ErrServerConfig) || !errors.As(err, &ce) || errors.Is(err, ErrServerUnavailable) {
					t.Fatalf("%s: %v, want a *ConfigError (ErrServerConfig, not ErrServerUnavailable)", what, err)
				}
				if ce.Server != "b" || !strings.Contains(err.Error(), c.cause) || !strings.Contains(err.Error(), "server b") {
					t.Fatalf("%s: %v, want server b and %q named", what, err, c.cause)
				}
			}
			for i := range 3 { // the same every time: not failed fast as down
				var p Photo
				wantConfig("read on b", e.db.Where("user_id = ?", ub).Take(&p).Error)
				wantConfig("write on b", e.db.Create(&Photo{UserID: ub, Caption: "x"}).Error)
				if i == 0 {
					var all []Photo
					wantConfig("read across shards", e.db.Clauses(AllShards()).Find(&all).Error)
				}
			}
			srv, err := e.p.pools.get(e.r.Snapshot(), "b")
			if err != nil {
				t.Fatal(err)
			}
			if srv.downUntil.Load() != 0 {
				t.Fatal("server b is taken as down after configuration errors")
			}
			a := Photo{UserID: ua, Caption: "on a"}
			if err := e.db.Create(&a).Error; err != nil {
				t.Fatalf("write on a: %v", err)
			}
			e.assertAt(t, "photos", a.ID, e.shardOf(ua))
			if c.fix == nil {
				return
			}
			c.fix(t, bouncer)
			testkit.Until(t, testkit.Wait, func() error {
				p := Photo{UserID: ub, Caption: "fixed"}
				err := e.db.Create(&p).Error
				if err == nil {
					e.assertAt(t, "photos", p.ID, e.shardOf(ub))
					return nil
				}
				if !errors.Is(err, ErrServerConfig) {
					t.Fatalf("after the fix: %v\n%s", err, bouncerLog(bouncer))
				}
				return fmt.Errorf("after the fix: %w\n%s", err, bouncerLog(bouncer))
			})
		})
	}
}

// TestCallerDeadlineIsNoOutage ends statements on server b with the
// caller's own deadline, while a lock holds the statement or while it
// waits for the pool's only connection, and checks that b's next
// statements run: the end of a caller's context says nothing about the
// server, so it is not taken as down (ServerRetry is an hour here, so a
// server taken as down would fail them fast).
func TestCallerDeadlineIsNoOutage(t *testing.T) {
	cases := []struct {
		name   string
		pooled bool
		hold   func(t *testing.T, e *env, ub int64, run func()) // holds b up while run runs
	}{
		{"slow statement", false, holdLock},
		{"slow statement through the pooler", true, holdLock},
		{"waiting for a pooled connection", false, holdConn},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := envOpts{cfg: func(cfg *Config) {
				cfg.ServerRetry = time.Hour
				cfg.MaxOpenConns = 1
			}}
			if c.pooled {
				o.appDSN = viaPooler(t, pgbouncer.Options{})
			}
			e := newEnv(t, o)
			ub := e.userOn(t, "b", 1)
			if err := e.db.Create(&Photo{UserID: ub, Caption: "x"}).Error; err != nil {
				t.Fatal(err)
			}
			c.hold(t, e, ub, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				var ps []Photo
				err := e.db.WithContext(ctx).Where("user_id = ?", ub).Find(&ps).Error
				if err == nil || errors.Is(err, ErrServerUnavailable) {
					t.Fatalf("statement past the caller's deadline: %v, want the context's error", err)
				}
				if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
					t.Fatalf("statement past the caller's deadline: %v, want the context's error", err)
				}
			})
			for range 3 {
				var ps []Photo
				if err := e.db.Where("user_id = ?", ub).Find(&ps).Error; err != nil || len(ps) != 1 {
					t.Fatalf("next statement on b: %v, %d rows", err, len(ps))
				}
			}
		})
	}
}

// holdLock runs run while a direct transaction on b holds an exclusive
// lock on the user's photos table, so that the plugin's read waits.
func holdLock(t *testing.T, e *env, ub int64, run func()) {
	ctx := context.Background()
	conn := pgtest.Connect(t, e.dsn["b"])
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{router.SchemaName(e.shardOf(ub)), "photos"}.Sanitize()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	run()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// holdConn runs run inside a transaction of the plugin that holds b's
// only pooled connection (MaxOpenConns is 1).
func holdConn(t *testing.T, e *env, ub int64, run func()) {
	tx := e.db.Begin()
	var ps []Photo
	if err := tx.Where("user_id = ?", ub).Find(&ps).Error; err != nil {
		t.Fatal(err)
	}
	run()
	if err := tx.Rollback().Error; err != nil {
		t.Fatal(err)
	}
}

func bouncerLog(b *pgbouncer.Bouncer) string {
	if b == nil {
		return ""
	}
	return b.Log()
}
