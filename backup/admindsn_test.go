package backup

import (
	"bytes"
	"context"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestDumpRestoreUseAdminDSN: with the server's app DSN pointing at a port
// nothing listens on, dump and restore reach the server through its admin
// DSN.
func TestDumpRestoreUseAdminDSN(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	e.fill(t, 3, 100)
	err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, "one", "postgres://postgres@127.0.0.1:1/app?sslmode=disable&connect_timeout=1", e.server)
	})
	if err != nil {
		t.Fatal(err)
	}
	before := e.contents(t, e.server)
	dump := e.dump(t)
	pgtest.Exec(t, e.server, `DELETE FROM shard_0002.tags`)
	if _, err := Restore(ctx, e.cat, bytes.NewReader(dump), RestoreOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	equalContents(t, "after restore", e.contents(t, e.server), before)
}
