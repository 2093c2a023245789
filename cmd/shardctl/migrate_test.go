package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/pgtest"
)

// TestMigrateFailedFile: a file whose SQL fails on a shard exits non-zero
// naming the shard, the server and the file, and says that nothing was
// recorded and what to do; the next migrate, without the file or with it
// fixed, succeeds.
func TestMigrateFailedFile(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	dir := t.TempDir()
	write := func(name, sql string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
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
	if code, out, errOut := shardctl("migrate", "--sql", dir, "--quiet"); code != 0 || !strings.Contains(out, "migrated 4 shard schemas") {
		t.Fatalf("migrate of the fixed file: exit %d, %q %q", code, out, errOut)
	}
}
