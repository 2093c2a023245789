package resolver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/internal/twophase"
	_ "github.com/shardkit/shardkit/migrations" // implements shardschema's operations
	"github.com/shardkit/shardkit/router"
)

func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// cluster is servers a and b (on two clusters) and a database "app",
// each with a table t; a and b carry shardkit's server schema.
type cluster struct {
	dsn map[string]string
	r   *router.Router
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctx := context.Background()
	c := &cluster{dsn: map[string]string{"a": pgtest.NewDatabase(t, 0), "b": pgtest.NewDatabase(t, 1), "app": pgtest.NewDatabase(t, 1)}}
	for name, dsn := range c.dsn {
		pgtest.Exec(t, dsn, `CREATE TABLE t (note text)`)
		if name == "app" {
			continue
		}
		if err := shardschema.EnsureServer(ctx, pgtest.Connect(t, dsn), idgen.DefaultLayout()); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := router.NewSnapshot(1, 2, []router.Server{{Name: "a", DSN: c.dsn["a"]}, {Name: "b", DSN: c.dsn["b"]}},
		[]router.Placement{{Shard: 0, Server: "a", State: router.StateActive}, {Shard: 1, Server: "b", State: router.StateActive}})
	if err != nil {
		t.Fatal(err)
	}
	if c.r, err = router.NewFixed(snap); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) resolver(cfg Config) *Resolver {
	cfg.Servers = c.r
	cfg.Databases = map[string]string{"app": c.dsn["app"]}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(cfg)
}

// coordinate begins the coordinator's transaction on server a, as the
// plugin does, and records its decision row.
func (c *cluster) coordinate(t *testing.T) (pgx.Tx, twophase.Decision) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Connect(t, c.dsn["a"]).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := twophase.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := tx.QueryRow(ctx, `INSERT INTO shardkit.tx_decisions (gid) VALUES ($1 || pg_current_xact_id()::text || $2) RETURNING gid`,
		"shardkit:v1:a:", ":"+nonce).Scan(&id); err != nil {
		t.Fatal(err)
	}
	d, err := twophase.ParseDecision(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, d.String()); err != nil {
		t.Fatal(err)
	}
	return tx, d
}

// prepare prepares a part on a database that writes note into t.
func (c *cluster) prepare(t *testing.T, db, gid, note string) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, c.dsn[db])
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, note); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE TRANSACTION '`+strings.ReplaceAll(gid, "'", "''")+`'`); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) count(t *testing.T, db, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pgtest.Connect(t, c.dsn[db]).QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *cluster) notes(t *testing.T, db, note string) int {
	return c.count(t, db, `SELECT count(*) FROM t WHERE note = $1`, note)
}

func pass(t *testing.T, r *Resolver) Report {
	t.Helper()
	rep, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("pass errors: %v", rep.Errors)
	}
	return rep
}

func TestResolverFollowsTheCoordinator(t *testing.T) {
	c := newCluster(t)
	r := c.resolver(Config{KeepDecisions: -1})
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "committed", false: "aborted"}[commit]
		t.Run(name, func(t *testing.T) {
			tx, d := c.coordinate(t)
			c.prepare(t, "b", d.Part(1).String(), name)
			c.prepare(t, "app", d.Part(2).String(), name)
			rep := pass(t, r)
			if len(rep.InDoubt) != 2 || rep.Committed+rep.RolledBack != 0 {
				t.Fatalf("coordinator in progress: %+v, want both parts left", rep)
			}
			if rep.Oldest() <= 0 {
				t.Fatalf("Oldest() = %v", rep.Oldest())
			}
			if commit {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			rep = pass(t, r)
			if len(rep.InDoubt) != 0 || commit && rep.Committed != 2 || !commit && rep.RolledBack != 2 {
				t.Fatalf("after the coordinator ended: %+v", rep)
			}
			want := map[bool]int{true: 1, false: 0}[commit]
			if c.notes(t, "b", name) != want || c.notes(t, "app", name) != want || c.notes(t, "a", d.String()) != want {
				t.Fatalf("parts not all %s", name)
			}
			for _, db := range []string{"a", "b", "app"} {
				if n := c.count(t, db, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`); n != 0 {
					t.Fatalf("%d prepared left on %s", n, db)
				}
			}
			pass(t, r) // a later pass deletes the decision, no part being left
			if n := c.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`); n != 0 {
				t.Fatalf("%d decision rows left", n)
			}
		})
	}
}

func TestResolverLeavesWhatItCannotDecide(t *testing.T) {
	c := newCluster(t)
	r := c.resolver(Config{AbortAfter: 1, KeepDecisions: -1})
	ctx := context.Background()
	nonce, _ := twophase.NewNonce()
	unknownServer := twophase.Decision{Coordinator: "gone", XID: 1000, Nonce: nonce}.Part(1).String()
	future := twophase.Decision{Coordinator: "a", XID: 1<<40 + 1000, Nonce: nonce}.Part(1).String() // the coordinator errs
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, c.dsn["b"])
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		for _, g := range []string{unknownServer, future, "not-shardkit"} {
			_, _ = conn.Exec(ctx, `ROLLBACK PREPARED '`+g+`'`)
		}
	})
	c.prepare(t, "b", unknownServer, "gone")
	c.prepare(t, "b", future, "future")
	c.prepare(t, "b", "not-shardkit", "other")
	rep, err := r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.InDoubt) != 2 || rep.Committed+rep.RolledBack != 0 {
		t.Fatalf("report %+v: want the two shardkit parts left in doubt", rep)
	}
	if n := c.count(t, "b", `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`); n != 3 {
		t.Fatalf("%d prepared transactions on b, want all 3 left", n)
	}
}

func TestResolverKeepsRecentDecisions(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	tx, _ := c.coordinate(t)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pass(t, c.resolver(Config{}))
	if n := c.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`); n != 1 {
		t.Fatalf("a decision younger than KeepDecisions was deleted (%d left)", n)
	}
	rep := pass(t, c.resolver(Config{KeepDecisions: -1}))
	if rep.DecisionsDeleted != 1 {
		t.Fatalf("DecisionsDeleted = %d", rep.DecisionsDeleted)
	}
}

// TestResolverKeepsDecisionsItCannotRuleOut: a pass that does not see the
// default database (no Config.Databases) commits the parts it sees and
// keeps the decision row, which the default database's part still needs:
// a later pass that sees it commits it too. Deleting the row left that
// part in doubt, its transaction committed on the servers and not there.
func TestResolverKeepsDecisionsItCannotRuleOut(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	tx, d := c.coordinate(t)
	c.prepare(t, "b", d.Part(1).String(), "both")
	c.prepare(t, "app", d.Part(2).String(), "both")
	t.Cleanup(func() { // a part left by a failure, so that the database drops
		conn, err := pgx.Connect(ctx, c.dsn["app"])
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `ROLLBACK PREPARED '`+d.Part(2).String()+`'`)
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	serversOnly := New(Config{Servers: c.r, KeepDecisions: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if rep := pass(t, serversOnly); rep.Committed != 1 {
		t.Fatalf("pass without the default database: %+v; want b's part committed", rep)
	}
	// The next pass sees no part of the decision: none on the servers.
	if rep := pass(t, serversOnly); rep.DecisionsDeleted != 0 || rep.DecisionsKept != 1 {
		t.Fatalf("second pass without the default database: %+v; want the decision kept", rep)
	}
	if n := c.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`); n != 1 {
		t.Fatalf("%d decision rows left, want the one app's part needs", n)
	}
	rep := pass(t, c.resolver(Config{KeepDecisions: -1}))
	if rep.Committed != 1 || len(rep.InDoubt) != 0 {
		t.Fatalf("pass with the default database: %+v; want app's part committed", rep)
	}
	if c.notes(t, "b", "both") != 1 || c.notes(t, "app", "both") != 1 {
		t.Fatal("the atomic transaction did not commit everywhere")
	}
	// Told that atomic transactions write only the servers, a pass
	// deletes what no part it sees needs.
	rep = pass(t, New(Config{Servers: c.r, KeepDecisions: -1, ServersOnly: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	if rep.DecisionsDeleted != 1 {
		t.Fatalf("ServersOnly pass: %+v, want the decision deleted", rep)
	}
}
