package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/twophase"
)

func TestStatusAndResolveInDoubt(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+a, "--server", "b="+b, "--shards", "4", "--sql", testSQLDir(t))
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	// A part prepared on b whose coordinator's transaction on a aborted:
	// what a process killed before its decision leaves.
	ctx := context.Background()
	coord := pgtest.Connect(t, a)
	tx, err := coord.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid uint64
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	nonce, _ := twophase.NewNonce()
	gid := twophase.Decision{Coordinator: "a", XID: xid, Nonce: nonce}.Part(1)
	part := pgtest.Connect(t, b)
	if _, err := part.Exec(ctx, `BEGIN; CREATE TABLE public.half (i int); PREPARE TRANSACTION `+gid.Literal()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = part.Exec(context.Background(), `ROLLBACK PREPARED `+gid.Literal()) })

	code, out, errOut := shardctl("status")
	if code != 0 || !strings.Contains(out, "atomic transactions in doubt: 1 prepared parts") || !strings.Contains(out, gid.String()) {
		t.Fatalf("status: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = shardctl("resolve")
	if code != 0 || !strings.Contains(out, "rolled back 1") {
		t.Fatalf("resolve: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = shardctl("status")
	if code != 0 || !strings.Contains(out, "atomic transactions in doubt: none") {
		t.Fatalf("status after resolve: exit %d, %q", code, out)
	}
	code, _, errOut = shardctl("resolve", "--database", "nodsn")
	if code != 2 {
		t.Fatalf("resolve --database without DSN: exit %d, %q", code, errOut)
	}
}
