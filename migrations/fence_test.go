package migrations

import (
	"context"
	"errors"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestMigrateRefusesAnOldPrimary: a server whose host answers on an older
// timeline than the primary the catalog records (an old primary back
// writable after a failover, as the catalog sees it) gets no migration: the
// run fails with a *ServerError wrapping router.ErrNotPrimary and applies
// nothing there, and Status reports it in the server's line.
func TestMigrateRefusesAnOldPrimary(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 4, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	// The record: pg0's system on a timeline after the one it answers on.
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.servers SET primary_system_id = $1, primary_timeline = 99 WHERE name = 'pg0'`,
		systemID(t, e.servers[0].DSN))
	err := Migrate(ctx, e.cat, testSQLv2, MigrateOptions{})
	var se *ServerError
	var npe *router.NotPrimaryError
	if !errors.As(err, &se) || se.Server != "pg0" || !errors.Is(err, router.ErrNotPrimary) || !errors.As(err, &npe) || npe.Recorded.Timeline != 99 {
		t.Fatalf("migrating with pg0's host older than its record: %v, want a *ServerError for pg0 wrapping a *router.NotPrimaryError", err)
	}
	var cols int
	if err := pgtest.Connect(t, e.servers[0].DSN).QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema LIKE 'shard_%' AND table_name = 'users' AND column_name = 'username'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != 0 {
		t.Fatalf("%d of pg0's shards got version 2's column users.username", cols)
	}
	r, err := Status(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	if r.Servers[0].Error == "" || r.Servers[1].Error != "" {
		t.Fatalf("status: pg0 %q, pg1 %q; want pg0's line to say it is refused", r.Servers[0].Error, r.Servers[1].Error)
	}
}

func systemID(t *testing.T, dsn string) string {
	t.Helper()
	var id string
	if err := pgtest.Connect(t, dsn).QueryRow(context.Background(), `SELECT system_identifier::text FROM pg_control_system()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
