package plugin

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestServerDSNChangeReopensPools changes a server's DSN in the catalog (a
// rotated password, a pooler put in front: here another application_name)
// and checks that the plugin's statements reach the server through the new
// DSN, and that the old pool's connections close.
func TestServerDSNChangeReopensPools(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOpts{})
	shard := 1
	server := e.serverOf(t, shard)
	if err := e.db.Create(&Photo{UserID: int64(shard), Caption: "before"}).Error; err != nil {
		t.Fatal(err)
	}
	count := func(app string) int {
		conn := pgtest.Connect(t, e.dsn[server])
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
		return n
	}
	if n := count("rotated"); n != 0 {
		t.Fatalf("%d connections named rotated before the change", n)
	}
	err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, server, e.dsn[server]+"&application_name=rotated", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	var got []Photo
	if err := e.db.Where("user_id = ?", shard).Find(&got).Error; err != nil || len(got) != 1 {
		t.Fatalf("read after the change: %d rows, err %v", len(got), err)
	}
	if err := e.db.Create(&Photo{UserID: int64(shard), Caption: "after"}).Error; err != nil {
		t.Fatal(err)
	}
	if n := count("rotated"); n == 0 {
		t.Fatal("no connection through the new DSN after the change")
	}
	// The old pool closes in the background; its connections go.
	testkit.Until(t, testkit.Wait, func() error {
		conn := pgtest.Connect(t, e.dsn[server])
		defer conn.Close(ctx)
		var n int
		var q string
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(format('%s/%s/%s', state, backend_type, left(query, 80)), '; '), '')
			FROM pg_stat_activity WHERE datname = current_database() AND application_name = '' AND pid <> pg_backend_pid()`).Scan(&n, &q); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return fmt.Errorf("%d connections of the old pool still open: %s", n, q)
		}
		return nil
	})
}
