package migrations

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// countShardTables counts the tables in shard schemas of each server.
func countShardTables(t *testing.T, servers []ServerSpec) (total int) {
	t.Helper()
	for _, s := range servers {
		var n int
		if err := pgtest.Connect(t, s.DSN).QueryRow(context.Background(),
			`SELECT count(*) FROM pg_tables WHERE schemaname LIKE 'shard\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

func TestProvisionResumesAfterCancel(t *testing.T) {
	e := newEnv(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := ProvisionOptions{Servers: e.servers, Shards: 200, ShardSQL: testSQL, BatchSize: 10,
		Progress: func(p Progress) {
			if p.Done >= 50 {
				cancel()
			}
		}}
	err := Provision(ctx, e.cat, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	half := countShardTables(t, e.servers)
	if half == 0 || half >= 600 {
		t.Fatalf("after the cancel: %d shard tables, want some but not all of 600", half)
	}
	calls := 0
	opts.Progress = func(Progress) { calls++ }
	if err := Provision(context.Background(), e.cat, opts); err != nil {
		t.Fatal(err)
	}
	if n := countShardTables(t, e.servers); n != 600 {
		t.Fatalf("after the rerun: %d shard tables, want 600", n)
	}
	if calls == 0 {
		t.Fatal("the rerun did no work")
	}
	checkRecords(t, e.servers, 200, 3)
}

// checkRecords checks that every shard schema has exactly want records.
func checkRecords(t *testing.T, servers []ServerSpec, shards, want int) {
	t.Helper()
	total := 0
	for _, s := range servers {
		var bad, n int
		if err := pgtest.Connect(t, s.DSN).QueryRow(context.Background(), `SELECT
			count(*) FILTER (WHERE c <> $1), count(*) FROM (
			SELECT schema_name, count(*) AS c FROM shardkit.shard_migrations GROUP BY 1) x`, want).Scan(&bad, &n); err != nil {
			t.Fatal(err)
		}
		if bad != 0 {
			t.Fatalf("server %s: %d schemas without exactly %d migration records", s.Name, bad, want)
		}
		total += n
	}
	if total != shards {
		t.Fatalf("%d schemas recorded, want %d", total, shards)
	}
}

// The child half of TestProvisionSurvivesSIGKILL: provision until killed.
const childEnv = "SHARDKIT_MIGRATIONS_TEST_CHILD"

func runChild() {
	ctx := context.Background()
	parts := strings.Split(os.Getenv(childEnv), " ")
	cat, err := catalog.Open(ctx, parts[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var servers []ServerSpec
	for i, dsn := range parts[1:] {
		servers = append(servers, ServerSpec{Name: fmt.Sprintf("pg%d", i), DSN: dsn})
	}
	err = Provision(ctx, cat, ProvisionOptions{Servers: servers, Shards: 800, ShardSQL: testSQL,
		BatchSize: 5})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func TestProvisionSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	e := newEnv(t, 2)
	args := []string{e.catalogDSN}
	for _, s := range e.servers {
		args = append(args, s.DSN)
	}
	child := testkit.StartChild(t, "", childEnv+"="+strings.Join(args, " "))
	// Kill it once some, but not all, schemas exist.
	conn := pgtest.Connect(t, e.servers[1].DSN)
	testkit.Eventually(t, time.Minute, func() bool { // the child makes progress (or ends)
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM shardkit.shard_migrations`).Scan(&n)
		return err == nil && n > 100 || child.Exited()
	})
	child.Kill()
	if !child.Killed() {
		t.Fatalf("the child finished before the kill: %v", child.Wait())
	}
	half := countShardTables(t, e.servers)
	t.Logf("killed with %d of 2400 shard tables created", half)
	if half >= 2400 {
		t.Fatal("the child finished before the kill")
	}
	if err := Provision(context.Background(), e.cat, ProvisionOptions{Servers: e.servers, Shards: 800, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	if n := countShardTables(t, e.servers); n != 2400 {
		t.Fatalf("after the rerun: %d shard tables, want 2400", n)
	}
	checkRecords(t, e.servers, 800, 3)
}
