package plugin

import (
	"context"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/router"
)

// TestOneShardPreparedAppRoleDSN: a server reached directly with a login
// of the application role (its app DSN names another user than its admin
// DSN, as a least-privilege deployment has it) is direct: with the
// default PreparedReadsDirect its one-shard reads and writes run
// prepared on the backend.
func TestOneShardPreparedAppRoleDSN(t *testing.T) {
	e := newEnv(t, envOpts{serial: true, shards: 64,
		appDSN: func(_, direct string) string { return shardtest.AppDSN(t, direct) },
		cfg: func(c *Config) {
			c.MaxOpenConns, c.MaxIdleConns = 1, 1
		}})
	s, ok := e.r.Snapshot().Server("a")
	if !ok || s.DSN == s.Admin() {
		t.Fatalf("server a: app DSN is its admin DSN, want an app-role login apart")
	}
	if got := readOneShard(t, e); got != 3 {
		t.Fatalf("%d one-shard statements prepared on server a's connection (app-role login, no pooler), want 3 (the insert, the read by ID, the read by key)", got)
	}
}

// readOneShard writes a row on a shard of server a, reads it by ID and by
// key three times each, and returns how many one-shard statements (reads
// and writes) are
// prepared in the one session of server a's pool (MaxOpenConns 1).
func readOneShard(t *testing.T, e *env) int {
	t.Helper()
	u := int64(1)
	for ; e.serverOf(t, e.shardOf(u)) != "a"; u++ {
	}
	p := Photo{UserID: u, Caption: "x"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var got Photo
		if err := e.db.First(&got, p.ID).Error; err != nil || got.ID != p.ID {
			t.Fatalf("First: %v, %+v", err, got)
		}
		if err := e.db.Where("user_id = ?", u).Take(&got).Error; err != nil || got.UserID != u {
			t.Fatalf("Take: %v, %+v", err, got)
		}
	}
	a, err := e.p.pools.get(e.r.Snapshot(), "a")
	if err != nil {
		t.Fatal(err)
	}
	return preparedOnShards(t, a.DB)
}

// TestOneShardUnnamedRecordedPooled: a server the catalog records as
// pooled gets its one-shard reads unnamed: behind a PgBouncer 1.18 in
// transaction mode (registration records it pooled from its DSNs: the
// pooler's port is not the server's), and reached with its one DSN,
// which alone would make it direct, but recorded pooled by hand (a
// pooler the DSNs do not show: the record, not the DSNs, decides).
func TestOneShardUnnamedRecordedPooled(t *testing.T) {
	for _, c := range []struct {
		name   string
		appDSN func(t *testing.T) func(server, direct string) string
		set    bool // record the servers pooled (SetServerLink)
	}{
		{"pgbouncer 1.18", func(t *testing.T) func(server, direct string) string {
			return viaPooler(t, pgbouncer.Options{Settings: map[string]string{"default_pool_size": "1"}})
		}, false},
		{"recorded pooled", func(t *testing.T) func(server, direct string) string { return nil }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{shards: 64, appDSN: c.appDSN(t),
				cfg: func(c *Config) { c.MaxOpenConns, c.MaxIdleConns = 1, 1 },
				before: func(e *env) {
					if !c.set {
						return
					}
					err := e.cat.Update(context.Background(), func(ctx context.Context, tx *catalog.Tx) error {
						return tx.SetServerLink(ctx, "a", router.LinkPooled)
					})
					if err != nil {
						t.Fatal(err)
					}
				}})
			if s, _ := e.r.Snapshot().Server("a"); s.Link != router.LinkPooled || s.Direct() {
				t.Fatalf("server a: %+v, want it recorded pooled", s)
			}
			if got := readOneShard(t, e); got != 0 {
				t.Fatalf("%d one-shard reads prepared on server a's connection, recorded pooled; want none", got)
			}
		})
	}
}
