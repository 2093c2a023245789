package rebalance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardkit/shardkit/router"
)

// TestDropPublicationUnderWrites: a move drops its publications while the
// shard they publish is written (a rollback's forward publication on the
// source, the reverse one on the target at the end). PostgreSQL builds a
// table's list of publications for every write from the catalog, and a
// DROP PUBLICATION of a schema's publication takes no lock on its tables:
// a write that reads the list just before the drop commits and the
// publication just after fails with "cache lookup failed for publication"
// (XX000), a write lost to a move. dropPublication locks the schema's
// tables against writes for the drop, so that every write reads the
// catalog either before or after it. Writers insert and update while 500
// publications of their schema are made and dropped: 0 writes may fail
// (with the drop unlocked, 29 of 7211 failed).
func TestDropPublicationUnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("a stress of publications dropped under writes: not in -short")
	}
	ctx := context.Background()
	e := newEnv(t, 1, 1, 1)
	pool := e.pools["s0"]
	schema := router.SchemaName(0)
	var stop atomic.Bool
	var writes, failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var id int64
			for !stop.Load() {
				var err error
				if id == 0 {
					err = pool.QueryRow(ctx, `INSERT INTO `+ident(schema, "photos")+` (user_id, caption) VALUES ($1, $2) RETURNING id`, 0, "w").Scan(&id)
				} else {
					_, err = pool.Exec(ctx, `UPDATE `+ident(schema, "photos")+` SET version = version + 1 WHERE id = $1`, id)
				}
				writes.Add(1)
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for i := range 500 {
		name := fmt.Sprintf("shardkit_race_%d", i)
		if err := createPublication(ctx, pool, name, schema); err != nil {
			t.Fatal(err)
		}
		if err := dropPublication(ctx, pool, name, schema); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d writes, %d failed", writes.Load(), failed.Load())
	if n := failed.Load(); n > 0 {
		err, _ := first.Load().(error)
		t.Errorf("%d of %d writes failed while publications of their schema were dropped; first: %v", n, writes.Load(), err)
	}
}
