package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestParseShardSpec(t *testing.T) {
	cases := []struct {
		spec string
		want []int
		bad  bool
	}{
		{"7", []int{7}, false},
		{"2-4", []int{2, 3, 4}, false},
		{"1,3,5", []int{1, 3, 5}, false},
		{"1,4-6,4", []int{1, 4, 5, 6}, false},
		{"", nil, true},
		{"4-2", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
		{"1,,2", nil, true},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			got, err := parseShardSpec(c.spec)
			if c.bad {
				if !errors.Is(err, errUsage) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestMoveFlagsExclusive(t *testing.T) {
	for _, args := range [][]string{
		{"move", "--shard", "1", "--catalog", "postgres://x"},
		{"move", "--shard", "1", "--to", "s1", "--resume", "--catalog", "postgres://x"},
		{"rebalance", "--parallel", "0", "--catalog", "postgres://x"},
		{"rebalance", "--by", "weight", "--catalog", "postgres://x"},
	} {
		if code, _, _ := shardctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestMoveDryRun: `move --dry-run` prints what a move would do and the
// preflight's checks, exits 0 when the move would proceed and 1 with the
// failures when it would be refused, and changes nothing either way.
func TestMoveDryRun(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+a, "--server", "b="+b,
		"--shards", "4", "--sql", testSQLDir(t)); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	// Shard 1 lives on a; an extra table made by raw SQL is carried.
	pgtest.Exec(t, a, `CREATE TABLE shard_0001.notes (id bigserial PRIMARY KEY, body text);
		INSERT INTO shard_0001.notes (body) SELECT 'n' FROM generate_series(1, 10);
		CREATE INDEX notes_body ON shard_0001.notes (body)`)

	code, out, errOut := shardctl("move", "--shard", "1", "--to", "b", "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("dry run:\n%s", out)
	for _, want := range []string{"shard 1 (shard_0001): a → b, online move — dry run, nothing changed",
		"notes", "made outside the per-shard SQL, carried", "table notes", "index notes_body on notes",
		"ok    wal_level on a: logical", "ok    replica identity on a", "ok    replication capacity on b",
		"ok    target schema absent on b", "would proceed"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	code, out, _ = shardctl("move", "--shard", "1", "--to", "a", "--dry-run")
	if code != 0 || !strings.Contains(out, "shard 1: already on a") {
		t.Errorf("dry run onto its own server: exit %d, %q", code, out)
	}

	// A table without a replica identity: refused, exit 1, named.
	pgtest.Exec(t, a, `CREATE TABLE shard_0001.raw_log (msg text)`)
	code, out, errOut = shardctl("move", "--shard", "0-1", "--to", "b", "--dry-run")
	if code != 1 {
		t.Fatalf("dry run with a table without replica identity: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"FAIL  replica identity: server a: table \"shard_0001\".\"raw_log\"", "would be refused: 1 of",
		"shard 0 (shard_0000): a → b", "would proceed"} {
		if !strings.Contains(out, want) {
			t.Errorf("refused dry run output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "raw_log") || !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("stderr %q does not name the failure", errOut)
	}
	// Nothing happened on b or in the catalog.
	var schemas, moves int
	conn := pgtest.Connect(t, b)
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_namespace WHERE nspname IN ('shard_0000', 'shard_0001')`).Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	cat := pgtest.Connect(t, catalog)
	if err := cat.QueryRow(context.Background(), `SELECT count(*) FROM shardkit.moves`).Scan(&moves); err != nil {
		t.Fatal(err)
	}
	if schemas != 0 || moves != 0 {
		t.Errorf("dry runs left %d schemas on b and %d moves in the journal", schemas, moves)
	}

	// A real move is refused the same way, before any change.
	code, _, errOut = shardctl("move", "--shard", "1", "--to", "b", "--quiet")
	if code != 1 || !strings.Contains(errOut, "replica identity") {
		t.Errorf("move: exit %d, %q; want 1 naming the replica identity", code, errOut)
	}
	if code, _, _ := shardctl("move", "--shard", "1", "--resume", "--dry-run"); code != 2 {
		t.Errorf("--dry-run with --resume: exit %d, want 2", code)
	}
}
