package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/pgtest"
)

// TestWarmUp checks that Use opens every registered table of every shard
// on each server (each shows a scan in Postgres's statistics), so that the
// first read across shards does not pay for it.
func TestWarmUp(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64, before: func(e *env) {
		// Provisioning scanned the tables: start the counts afresh.
		for _, name := range e.servers {
			e.rawExec(t, name, "SELECT pg_stat_reset()")
		}
	}})
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for _, name := range e.servers {
		for {
			// Statistics reach the views within a second or so of the
			// warm-up's transactions: wait for them.
			var cold []string
			conn := pgtest.Connect(t, e.dsn[name])
			rows, err := conn.Query(ctx, `SELECT schemaname || '.' || relname FROM pg_stat_user_tables
				WHERE schemaname LIKE 'shard\_%' AND relname IN ('photos', 'likes', 'albums', 'accounts')
				AND seq_scan + coalesce(idx_scan, 0) = 0 ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				cold = append(cold, s)
			}
			rows.Close()
			_ = conn.Close(ctx)
			if len(cold) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %s: %d shard tables never opened at start-up, e.g. %v", name, len(cold), cold[:min(5, len(cold))])
			}
			time.Sleep(200 * time.Millisecond) // poll: statistics arrive asynchronously
		}
	}
}
