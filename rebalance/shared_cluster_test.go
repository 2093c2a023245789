package rebalance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestMovesOfTwoCatalogsOnSharedClusters: two catalogs whose servers are
// databases of the same clusters move the same shard at the same time.
// Each catalog numbers its moves from 1, and replication slots are named
// per cluster: without the move's tag in the names, the second mover
// would drop the first one's slot as a leftover of its own and the first
// would then stream the second catalog's changes. Both movers wait, once
// their forward slot exists, until the other's exists too (or its move
// failed); each then checks its slot is in its own database and writes
// rows that only logical replication carries to its target.
func TestMovesOfTwoCatalogsOnSharedClusters(t *testing.T) {
	ctx := context.Background()
	envs := []*env{newEnv(t, 2, 1, 4), newEnv(t, 2, 1, 4)}
	seeded := []int{200, 300} // distinct, so that rows from the other catalog show
	const streamed = 10
	arrived, both, failed := make(chan struct{}, len(envs)), make(chan struct{}), make(chan struct{})
	go func() {
		for range envs {
			select {
			case <-arrived:
			case <-failed:
				return
			}
		}
		close(both)
	}()
	var failOnce sync.Once
	var wg sync.WaitGroup
	moves := make([]Move, len(envs))
	errs := make([]error, len(envs))
	for i, e := range envs {
		seedPhotos(t, e, 0, seeded[i])
		mv := e.mover(t, Config{hook: func(m Move, s Step, done bool) {
			if s != stepCopiedSnapshot || !done {
				return
			}
			arrived <- struct{}{}
			select {
			case <-both:
			case <-failed:
				return
			case <-time.After(testkit.Wait):
				t.Errorf("catalog %d: the other move neither made its slot nor failed in %v", i, testkit.Wait)
				return
			}
			n, _ := moveNames(m)
			var mine bool
			if err := e.pools["s0"].QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database())`, n.fwd).Scan(&mine); err != nil || !mine {
				t.Errorf("catalog %d: slot %s not in the catalog's own database once both slots were made (err %v)", i, n.fwd, err)
			}
			for k := range streamed {
				if _, err := e.rawInsert(ctx, "s0", 0, fmt.Sprintf("streamed %d", k)); err != nil {
					t.Errorf("catalog %d: write during the move: %v", i, err)
				}
			}
		}})
		wg.Go(func() {
			if moves[i], errs[i] = mv.Move(ctx, 0, "s1", MoveOptions{}); errs[i] == nil {
				_, errs[i] = mv.Complete(ctx, 0) // drop the reverse replication
			}
			if errs[i] != nil {
				failOnce.Do(func() { close(failed) })
			}
		})
	}
	wg.Wait()
	for i, e := range envs {
		if errs[i] != nil {
			t.Fatalf("catalog %d: move and complete shard 0: %v", i, errs[i])
		}
		if moves[i].ID != 1 || moves[i].Tag == "" {
			t.Fatalf("catalog %d: move %d tagged %q, want move 1 with a tag", i, moves[i].ID, moves[i].Tag)
		}
		if p := e.placement(t, 0); p.Server != "s1" {
			t.Fatalf("catalog %d: shard 0 on %s after the move, want s1", i, p.Server)
		}
		if got, want := countPhotos(t, e, "s1"), int64(seeded[i]+streamed); got != want {
			t.Errorf("catalog %d: %d photos on s1 after the move, want %d", i, got, want)
		}
		if l := e.leftovers(t); len(l) > 0 {
			t.Errorf("catalog %d: replication objects left after the move: %s", i, strings.Join(l, ", "))
		}
	}
	if moves[0].Tag == moves[1].Tag {
		t.Fatalf("both moves tagged %q", moves[0].Tag)
	}
}
