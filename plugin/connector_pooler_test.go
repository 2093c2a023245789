package plugin

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestConcurrentConnectsDropRefusedStatementTimeout: connections opened
// at once through a pooler that refuses the statement_timeout startup
// parameter all succeed. The seam makes every attempt send the parameter
// before any refusal arrives, as a burst of reads on a fresh pool does;
// before the fix only the first refused attempt dialed again without the
// parameter, and the others failed with a *ConfigError (a request error
// seen once in the pooled demo).
func TestConcurrentConnectsDropRefusedStatementTimeout(t *testing.T) {
	direct := pgtest.NewDatabase(t, 0)
	dsn := viaPooler(t, pgbouncer.Options{})("a", direct)
	c, err := newServerConnector(&Config{StatementTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)}, "a", dsn)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var sent sync.WaitGroup
	sent.Add(n)
	var calls atomic.Int32
	c.dialing = func() {
		if calls.Add(1) <= n { // the first dial of each attempt, with the parameter
			sent.Done()
			sent.Wait()
		}
	}
	errs := make(chan error, n)
	for range n {
		go func() {
			conn, err := c.Connect(context.Background())
			if err == nil {
				_ = conn.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a connection attempt under way when the pooler first refused statement_timeout: %v", err)
		}
	}
	if !c.refused.Load() {
		t.Fatal("the connector did not learn that the pooler refuses statement_timeout")
	}
}
