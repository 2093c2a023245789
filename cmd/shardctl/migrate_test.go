package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// sqlDir is an empty per-shard SQL directory of the test's and a function
// that writes a file into it.
func sqlDir(t *testing.T) (string, func(name, sql string)) {
	dir := t.TempDir()
	return dir, func(name, sql string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigrateFailedFile: a file whose SQL fails on a shard exits non-zero
// naming the shard, the server and the file, and says that nothing was
// recorded and what to do; the next migrate, without the file or with it
// fixed, succeeds.
func TestMigrateFailedFile(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	dir, write := sqlDir(t)
	write("0001_a.sql", "CREATE TABLE a (id bigint PRIMARY KEY DEFAULT next_id());")
	code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+a, "--server", "b="+b, "--shards", "4", "--sql", dir)
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	write("0002_b.sql", "CREATE TABLE b (id bigint PRIMARY KEY, oops);")
	code, _, errOut = shardctl("migrate", "--sql", dir, "--quiet")
	for _, want := range []string{"migration failed", "file 0002_b.sql", "on server", "the catalog records none of this run's files", "run migrate again"} {
		if code == 0 || !strings.Contains(errOut, want) {
			t.Fatalf("migrate of a failing file: exit %d, stderr %q; want an error with %q", code, errOut, want)
		}
	}
	t.Logf("migrate of a failing file: %s", errOut)
	if err := os.Remove(filepath.Join(dir, "0002_b.sql")); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := shardctl("migrate", "--sql", dir, "--quiet"); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate without the failed file: exit %d, %q %q", code, out, errOut)
	}
	write("0002_b.sql", "CREATE TABLE b (id bigint PRIMARY KEY);")
	if code, out, errOut := shardctl("migrate", "--sql", dir, "--quiet"); code != 0 || !strings.Contains(out, "migrated 4 shard schemas on 2 servers") {
		t.Fatalf("migrate of the fixed file: exit %d, %q %q", code, out, errOut)
	}
}

// TestMigrateLockWaitAndDryRun: --dry-run lists what would run where and
// changes nothing; a transaction holding one shard's table makes migrate
// report each lock timeout with the blocker's pid, give that schema up
// past --max-lock-wait, exit non-zero saying how to end the blocker, and
// print the summary; once the blocker ends, the rerun does the one schema
// left.
func TestMigrateLockWaitAndDryRun(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a := pgtest.NewDatabase(t, 0)
	dir, write := sqlDir(t)
	write("0001_a.sql", "CREATE TABLE a (id bigint PRIMARY KEY DEFAULT next_id());")
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+a, "--shards", "8", "--sql", dir); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	write("0002_b.sql", "ALTER TABLE a ADD COLUMN b int NOT NULL DEFAULT 0;")
	write("0003_c.sql", "-- shardkit:no-transaction\nCREATE INDEX CONCURRENTLY a_b ON a (b);")
	code, out, errOut := shardctl("migrate", "--sql", dir, "--dry-run")
	for _, want := range []string{"8 shard schemas on 1 servers would be migrated", "0002_b.sql", "0003_c.sql", "0-7", "outside a transaction"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("dry run: exit %d, %q %q; want %q", code, out, errOut, want)
		}
	}
	ctx := context.Background()
	conn := pgtest.Connect(t, a)
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM shard_0006.a`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = shardctl("migrate", "--sql", dir, "--quiet", "--lock-timeout", "50ms", "--max-lock-wait", "300ms")
	blocker := fmt.Sprintf("pid %d (idle in transaction", pid)
	for _, want := range []string{"lock timeout 1 on shard_0006 (server a, 0002_b.sql)", blocker, "gave up waiting for a lock",
		fmt.Sprintf("pg_terminate_backend(%d)", pid), "run migrate again"} {
		if code == 0 || !strings.Contains(errOut, want) {
			t.Fatalf("migrate beside a blocker: exit %d, stderr %q; want %q", code, errOut, want)
		}
	}
	if !strings.Contains(out, "migrated 7 shard schemas on 1 servers") || !strings.Contains(out, "(1 left: run migrate again)") ||
		!strings.Contains(out, "longest lock wait") {
		t.Fatalf("migrate beside a blocker: stdout %q; want the summary", out)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = shardctl("migrate", "--sql", dir, "--quiet")
	if code != 0 || !strings.Contains(out, "migrated 1 shard schemas") || !strings.Contains(out, "recorded in the catalog: 0003_c.sql") {
		t.Fatalf("rerun: exit %d, %q %q", code, out, errOut)
	}
}
