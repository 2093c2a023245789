package plugin

import (
	"testing"

	"github.com/shardkit/shardkit/internal/harness/shardtest"
)

// TestOneShardPreparedAppRoleDSN: a server reached directly with a login
// of the application role (its app DSN names another user than its admin
// DSN, as a least-privilege deployment has it) is direct: with the
// default PreparedReadsDirect its one-shard reads run prepared on the
// backend.
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
	if got := preparedOnShards(t, a.DB); got != 2 {
		t.Fatalf("%d one-shard reads prepared on server a's connection (app-role login, no pooler), want 2 (by ID, by key)", got)
	}
}
