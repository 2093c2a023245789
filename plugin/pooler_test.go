package plugin

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// viaPooler returns an envOpts.appDSN that sends the plugin through a
// PgBouncer (transaction pool mode unless opts says otherwise) in front
// of each cluster the servers' direct DSNs name, started on first use and
// stopped when the test ends. The test is skipped, saying how to install
// it, when there is no pgbouncer binary.
func viaPooler(t testing.TB, opts pgbouncer.Options) func(server, direct string) string {
	t.Helper()
	needPgBouncer(t)
	bouncers := map[string]*pgbouncer.Bouncer{} // by the cluster's host:port
	return func(_, direct string) string {
		b := bouncerFor(t, bouncers, direct, opts)
		u, _ := url.Parse(direct)
		return b.DSN(strings.TrimPrefix(u.Path, "/"))
	}
}

// behindPooler is srv with its application DSN at a pooler, recorded
// pooled as the catalog records such a server: a copy that kept the env's
// record (direct) would have the plugin name its statements through a
// pooler that may not carry them.
func behindPooler(srv router.Server, dsn string) router.Server {
	srv.DSN, srv.Link = dsn, router.LinkPooled
	return srv
}

func needPgBouncer(t testing.TB) {
	t.Helper()
	if _, err := pgbouncer.Binary(); err != nil {
		t.Skip(err)
	}
}

// bouncerFor returns the PgBouncer in front of the cluster of a direct
// DSN, starting it on first use.
func bouncerFor(t testing.TB, bouncers map[string]*pgbouncer.Bouncer, direct string, opts pgbouncer.Options) *pgbouncer.Bouncer {
	t.Helper()
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := bouncers[u.Host]; ok {
		return b
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	opts.Port = port
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	bouncers[u.Host] = b
	return b
}

// TestThroughPooler runs the shapes that once failed behind PgBouncer in
// transaction mode (GORM's PrepareStmt, a BeforeCreate hook that sets the
// shard key, dbresolver registered beside the plugin) with the default
// configuration, from many goroutines at once so that clients share the
// pooler's server connections, each row checked with direct SQL. The
// pooler refuses the statement_timeout the plugin adds: that is logged
// once per server, and statements run without it.
func TestThroughPooler(t *testing.T) {
	var log testkit.SyncBuffer
	e := newEnv(t, envOpts{
		appDSN: viaPooler(t, pgbouncer.Options{Settings: map[string]string{"default_pool_size": "4"}}),
		gorm:   func(c *gorm.Config) { c.PrepareStmt = true },
		beside: func(db *gorm.DB) error { return db.Use(dbresolver.Register(dbresolver.Config{})) },
		cfg:    func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) },
	})
	const workers, rounds = 8, 15
	var g errgroup.Group
	ids := make([][]int64, workers)
	for w := range workers {
		g.Go(func() error {
			for i := range rounds {
				u := int64(w*rounds + i + 1)
				var p Photo
				if i%2 == 0 {
					p = Photo{Caption: fmt.Sprintf("user:%d", u)} // the hook sets the key
				} else {
					p = Photo{UserID: u, Caption: "direct"}
				}
				if err := e.db.Create(&p).Error; err != nil {
					return fmt.Errorf("create for user %d: %w", u, err)
				}
				if p.UserID != u {
					return fmt.Errorf("hook set user %d, want %d", p.UserID, u)
				}
				ids[w] = append(ids[w], p.ID)
				var got Photo
				if err := e.db.Where("user_id = ?", u).Take(&got).Error; err != nil || got.ID != p.ID {
					return fmt.Errorf("read user %d: %v (id %d, want %d)", u, err, got.ID, p.ID)
				}
				if err := e.db.Model(&got).Update("likes", i).Error; err != nil {
					return fmt.Errorf("update user %d: %w", u, err)
				}
				err := e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&Photo{UserID: u, Caption: "in tx"}).Error; err != nil {
						return err
					}
					return tx.Where("user_id = ? AND caption = ?", u, "in tx").Delete(&Photo{}).Error
				})
				if err != nil {
					return fmt.Errorf("transaction for user %d: %w", u, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for w := range workers {
		for i, id := range ids[w] {
			e.assertAt(t, "photos", id, e.shardOf(int64(w*rounds+i+1)))
		}
	}
	var n int64
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Count(&n).Error; err != nil || n != workers*rounds {
		t.Fatalf("count across shards: %d, %v; want %d", n, err, workers*rounds)
	}
	// A GORM session with PrepareStmt on top of the plugin's connection.
	s := e.db.Session(&gorm.Session{PrepareStmt: true})
	for range 3 {
		var got []Photo
		if err := s.Where("user_id = ?", 1).Find(&got).Error; err != nil || len(got) != 1 {
			t.Fatalf("PrepareStmt session: %v, %d rows", err, len(got))
		}
	}
	if got := strings.Count(log.String(), "refuses statement_timeout"); got != len(e.servers) {
		t.Fatalf("the refused statement_timeout was logged %d times, want once per server (%d):\n%s", got, len(e.servers), log.String())
	}
	e.defaultUntouched(t)
}

// TestPrepareCreatesNoServerStatement checks, on a direct connection where
// the session's prepared statements can be counted, that database/sql's
// Prepare on a server pool (what GORM's PrepareStmt calls) leaves no
// named statement on the server by default, and does when the
// configuration opts in to prepared statements.
func TestPrepareCreatesNoServerStatement(t *testing.T) {
	cases := []struct {
		name     string
		capacity int
		want     bool // a named statement on the server after Prepare
	}{
		{"default", 0, false},
		{"negative is the default", -1, false},
		{"opted in", 64, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{one: true, cfg: func(cfg *Config) { cfg.StatementCacheCapacity = c.capacity }})
			ctx := context.Background()
			srv, err := e.p.pools.get(e.r.Snapshot(), "a")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := srv.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			q := "SELECT count(*) FROM " + pgx.Identifier{router.SchemaName(0), "photos"}.Sanitize() + " WHERE user_id = $1"
			st, err := conn.PrepareContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var n int
			for i := range 3 {
				if err := st.QueryRowContext(ctx, i).Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			var named int
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`, q).Scan(&named); err != nil {
				t.Fatal(err)
			}
			if got := named > 0; got != c.want {
				t.Fatalf("named statements for the prepared SQL on the server: %d, want any: %v", named, c.want)
			}
		})
	}
}

// TestServerConnIsPgx checks that the default OpenDB's connections give
// the *pgx.Conn behind them to the code that needs it (COPY, the warm-up)
// in both execution modes.
func TestServerConnIsPgx(t *testing.T) {
	for _, capacity := range []int{0, 64} {
		t.Run(strconv.Itoa(capacity), func(t *testing.T) {
			e := newEnv(t, envOpts{one: true, cfg: func(c *Config) { c.StatementCacheCapacity = capacity }})
			srv, err := e.p.pools.get(e.r.Snapshot(), "a")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			conn, err := srv.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			err = conn.Raw(func(dc any) error {
				if _, ok := dc.(interface{ Conn() *pgx.Conn }); !ok {
					return fmt.Errorf("%T has no Conn() *pgx.Conn", dc)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := execUnprepared(ctx, conn, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
