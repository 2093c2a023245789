package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"gorm.io/gorm"
)

// oneShardEnv is an environment whose servers have one connection each,
// so that a test reads the session its statements ran in, and users
// whose shards are on server a, one per shard.
func oneShardEnv(t *testing.T, prepared PreparedReads, users int) (*env, *sql.DB, []int64) {
	t.Helper()
	e := newEnv(t, envOpts{serial: true, shards: 64, cfg: func(c *Config) {
		c.MaxOpenConns, c.MaxIdleConns = 1, 1
		c.PreparedReads = prepared
	}})
	var onA []int64
	for u := int64(1); len(onA) < users; u++ {
		if e.serverOf(t, e.shardOf(u)) == "a" {
			onA = append(onA, u)
		}
	}
	srv, err := e.p.pools.get(e.r.Snapshot(), "a")
	if err != nil {
		t.Fatal(err)
	}
	return e, srv.DB, onA
}

// preparedOnShards counts the statements on photos prepared in the one
// session of db.
func preparedOnShards(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%"shard\_%"."photos"%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOneShardStatementsPrepared(t *testing.T) {
	for _, c := range []struct {
		name     string
		prepared PreparedReads
		want     int
	}{{"direct", PreparedReadsDirect, 2}, {"never", PreparedReadsNever, 0}} {
		t.Run(c.name, func(t *testing.T) {
			e, a, users := oneShardEnv(t, c.prepared, 1)
			u := users[0]
			p := Photo{UserID: u, Caption: "x"}
			for range 3 {
				p = Photo{UserID: u, Caption: "x"}
				if err := e.db.Create(&p).Error; err != nil {
					t.Fatal(err)
				}
				var got Photo
				if err := e.db.First(&got, p.ID).Error; err != nil || got.ID != p.ID {
					t.Fatalf("First: %v, %+v", err, got)
				}
				if err := e.db.Where("user_id = ?", u).Take(&got).Error; err != nil || got.UserID != u {
					t.Fatalf("Take: %v, %+v", err, got)
				}
				if err := e.db.Model(&Photo{ID: p.ID}).Update("caption", "y").Error; err != nil {
					t.Fatal(err)
				}
			}
			// Raw text is the user's: never prepared by the plugin.
			var n int64
			if err := e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error {
				return tx.Raw(`SELECT count(*) FROM photos WHERE user_id = ?`, u).Scan(&n).Error
			}); err != nil || n != 3 {
				t.Fatalf("raw: %v, %d", err, n)
			}
			if got := preparedOnShards(t, a); got != c.want {
				t.Fatalf("%d one-shard statements prepared on server a's connection, want %d (read by ID, read by key; writes stay unnamed)", got, c.want)
			}
		})
	}
}

func TestOneShardStatementsBounded(t *testing.T) {
	defer func(n int) { preparedShardStmtsPerConn = n }(preparedShardStmtsPerConn)
	preparedShardStmtsPerConn = 5
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 12)
	for _, u := range users {
		var got []Photo
		if err := e.db.Where("user_id = ?", u).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
	}
	if got := preparedOnShards(t, a); got != 5 {
		t.Fatalf("%d one-shard statements prepared after reading %d shards, want the bound, 5", got, len(users))
	}
}

// A column added under a prepared SELECT * changes its result type;
// Postgres refuses to run the statement again, and the read runs once
// unnamed, then prepared afresh.
func TestOneShardPreparedAfterAddColumn(t *testing.T) {
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 1)
	u := users[0]
	p := Photo{UserID: u, Caption: "x"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		var got Photo
		if err := e.db.First(&got, p.ID).Error; err != nil || got.ID != p.ID {
			t.Fatalf("First: %v, %+v", err, got)
		}
	}
	read()
	if _, err := a.ExecContext(context.Background(), fmt.Sprintf(`ALTER TABLE "shard_%04d"."photos" ADD COLUMN extra int`, e.shardOf(u))); err != nil {
		t.Fatal(err)
	}
	read()
	read()
	if err := e.db.Transaction(func(tx *gorm.DB) error {
		var got Photo
		return tx.First(&got, p.ID).Error
	}); err != nil {
		t.Fatal(err)
	}
}
