package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestDumpRestore drives dump and restore through the command line: a
// dump, rows written after it, a refused unconfirmed restore, a restore
// with --yes that brings back the dump's rows, and one into a scratch
// database.
func TestDumpRestore(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	srv := pgtest.NewDatabase(t, 1)
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+srv, "--shards", "4", "--sql", testSQLDir(t)); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	pgtest.Exec(t, srv, `INSERT INTO shard_0001.photos (user_id, caption) SELECT 1 + 4 * g, 'c' || g FROM generate_series(1, 250) g`)
	count := func(dsn string) (n, top int64) {
		t.Helper()
		if err := pgtest.Connect(t, dsn).QueryRow(context.Background(), `SELECT count(*), max(id) FROM shard_0001.photos`).Scan(&n, &top); err != nil {
			t.Fatal(err)
		}
		return n, top
	}
	file := filepath.Join(t.TempDir(), "s1.skdump")
	code, out, errOut := shardctl("dump", "--shard", "1", "--out", file)
	if code != 0 || !strings.Contains(out, "dumped shard 1 (shard_0001 on server a") || !strings.Contains(out, "photos   250") {
		t.Fatalf("dump: exit %d, %q %q", code, out, errOut)
	}
	pgtest.Exec(t, srv, `INSERT INTO shard_0001.photos (user_id) SELECT 1 FROM generate_series(1, 50)`)
	_, before := count(srv)

	if code, _, errOut := shardctl("restore", "--in", file); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("restore without --yes: exit %d, %q", code, errOut)
	}
	code, out, errOut = shardctl("restore", "--in", file, "--yes")
	if code != 0 || !strings.Contains(out, "restored shard 1 (shard_0001) on its home, server a") || !strings.Contains(out, "every table matches") {
		t.Fatalf("restore --yes: exit %d, %q %q", code, out, errOut)
	}
	if n, _ := count(srv); n != 250 {
		t.Fatalf("%d rows after the restore, want the dump's 250", n)
	}
	pgtest.Exec(t, srv, `INSERT INTO shard_0001.photos (user_id) VALUES (1)`)
	if _, top := count(srv); top <= before {
		t.Fatalf("new ID %d after the restore, not above %d", top, before)
	}

	scratch := pgtest.NewDatabase(t, 0)
	code, out, errOut = shardctl("restore", "--in", file, "--into", scratch)
	if code != 0 || !strings.Contains(out, "the catalog is unchanged") {
		t.Fatalf("restore --into: exit %d, %q %q", code, out, errOut)
	}
	if n, _ := count(scratch); n != 250 {
		t.Fatalf("%d rows in the scratch database, want 250", n)
	}

	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("not a dump"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := shardctl("restore", "--in", bad, "--yes"); code != 1 || !strings.Contains(errOut, "not a readable shardkit shard dump") {
		t.Fatalf("restore of a bad file: exit %d, %q", code, errOut)
	}
	if code, _, errOut := shardctl("dump"); code != 2 || !strings.Contains(errOut, "--shard") {
		t.Fatalf("dump without --shard: exit %d, %q", code, errOut)
	}
}
