package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// start gives a test a cluster and, in front of it, a PgBouncer with opts.
func start(t *testing.T, ctx context.Context, opts Options) (*pglocal.Cluster, *Bouncer) {
	t.Helper()
	if _, err := Binary(); err != nil {
		t.Skip(err)
	}
	set, err := pglocal.Start(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Stop)
	c := set.Clusters[0]
	opts.Port = c.Port
	b, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return c, b
}

func TestTransactionPooling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, b := start(t, ctx, Options{})
	conn, err := pgx.Connect(ctx, b.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// pool_mode is PgBouncer's own setting; through to Postgres SHOW would fail.
	if mode := showConfig(t, ctx, b, "pool_mode"); mode != "transaction" {
		t.Fatalf("pool_mode = %q, want transaction", mode)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1", pgx.QueryExecModeCacheDescribe).Scan(&one); err != nil || one != 1 {
		t.Fatalf("query through the pooler: %v %d", err, one)
	}
	// A startup parameter PgBouncer 1.18 does not know is refused.
	cfg, err := pgx.ParseConfig(b.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["statement_timeout"] = "1000"
	_, err = pgx.ConnectConfig(ctx, cfg)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "unsupported startup parameter") {
		t.Fatalf("statement_timeout at start: %v, want PgBouncer's refusal", err)
	}
}

func TestPasswords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, b := start(t, ctx, Options{Users: map[string]string{"postgres": "right"}})
	if conn, err := pgx.Connect(ctx, b.DSN("postgres")); err != nil {
		t.Fatalf("right password: %v", err)
	} else {
		_ = conn.Close(ctx)
	}
	_, err := pgx.Connect(ctx, b.UserDSN("postgres", "wrong", "postgres"))
	// PgBouncer 1.18 says so with SQLSTATE 08P01, not Postgres's 28P01.
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "password authentication failed") {
		t.Fatalf("wrong password: %v, want PgBouncer's refusal", err)
	}
	// A new password takes effect on reload, even of the same length
	// written within the same second (PgBouncer looks at mtime and size).
	if err := b.SetUsers(map[string]string{"postgres": "wrong"}); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, testkit.Wait, func() error {
		conn, err := pgx.Connect(ctx, b.UserDSN("postgres", "wrong", "postgres"))
		if err != nil {
			return fmt.Errorf("new password after reload: %w\n%s", err, b.Log())
		}
		_ = conn.Close(ctx)
		return nil
	})
}
