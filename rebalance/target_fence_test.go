package rebalance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shardkit/shardkit/router"
)

// TestTargetRefusesWritesUntilTheFlip: a move's copy of the shard on its
// target takes no write but the move's own until the flip, so that a
// router whose map still places the shard there from an earlier move
// (one rolled back a moment before) is told to reload rather than write
// rows that a rollback of this move would drop. The refusal carries the
// fence's SQLSTATE; replication still applies; after the flip the target
// takes writes. Online and offline.
func TestTargetRefusesWritesUntilTheFlip(t *testing.T) {
	for _, offline := range []bool{false, true} {
		t.Run(fmt.Sprintf("offline=%v", offline), func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, 2, 2, 2) // shard 0 on s0
			seedPhotos(t, e, 0, 200)
			schema := router.SchemaName(0)
			strayWrite := func() error {
				_, err := e.pools["s1"].Exec(ctx, `INSERT INTO `+ident(schema, "photos")+` (user_id, caption) VALUES (2, 'stray')`)
				return err
			}
			var mu sync.Mutex
			tried := map[Step]error{}
			try := map[Step]bool{stepTargetSchema: true, stepIndexes: true, stepCaughtUp: true, stepSequences: true}
			mv := e.mover(t, Config{hook: func(_ Move, s Step, done bool) {
				if done && try[s] {
					err := strayWrite()
					mu.Lock()
					tried[s] = err
					mu.Unlock()
				}
			}})
			if _, err := mv.Move(ctx, 0, "s1", MoveOptions{Offline: offline}); err != nil {
				t.Fatal(err)
			}
			if len(tried) == 0 {
				t.Fatal("no write was tried on the target before the flip")
			}
			for s, err := range tried {
				if !router.IsFenceError(err) {
					t.Errorf("a write on the target after step %s: %v, want the fence's refusal", s, err)
				}
			}
			// Every seeded row came over (the copy and the apply worker are
			// not refused), and no stray one.
			var seeded, stray int
			if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FILTER (WHERE caption = 'seed'), count(*) FILTER (WHERE caption = 'stray') FROM `+ident(schema, "photos")).Scan(&seeded, &stray); err != nil {
				t.Fatal(err)
			}
			if seeded != 200 || stray != 0 {
				t.Fatalf("the target holds %d seeded rows and %d stray ones, want 200 and 0", seeded, stray)
			}
			if p := e.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
				t.Fatalf("shard 0 is %+v, want active on s1", p)
			}
			if err := strayWrite(); err != nil {
				t.Fatalf("a write on the shard's new home: %v", err)
			}
		})
	}
}
