package rebalance_test

import (
	"context"
	"fmt"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

// A Mover moves one logical shard online, then the move is verified and
// completed (or rolled back). This example needs live databases, so it
// is compiled but not run (no Output line).
func ExampleMover_Move() {
	ctx := context.Background()
	cat, err := catalog.Open(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cat.Close()
	mv, err := rebalance.New(rebalance.Config{Catalog: cat})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mv.Close()
	// Ends fenced for a few milliseconds at cutover, then reversible: the
	// old home is kept current by reverse replication.
	m, err := mv.Move(ctx, 1341, "b", rebalance.MoveOptions{})
	if err != nil {
		fmt.Println(err) // a *rebalance.MoveError: Resume or Rollback the move
		return
	}
	if _, err := mv.Verify(ctx, m.Shard); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := mv.Complete(ctx, m.Shard); err != nil { // or mv.Rollback
		fmt.Println(err)
	}
}

// Every service should run the fence watcher, so that a mover killed
// inside a cutover leaves its shard unwritable for at most the fence
// lease. Compiled, not run: it needs a catalog.
func ExampleMover_WatchFences() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := catalog.Open(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cat.Close()
	mv, err := rebalance.New(rebalance.Config{Catalog: cat})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mv.Close()
	go func() { _ = mv.WatchFences(ctx, 0) }() // until ctx ends
}

// Plan reads nothing but the map and the sizes given: here four equal
// shards on server a, and a new, empty server b.
func ExamplePlan() {
	snap, err := router.NewSnapshot(1, 4,
		[]router.Server{{Name: "a", State: "active"}, {Name: "b", State: "active"}},
		[]router.Placement{
			{Shard: 0, Server: "a", State: router.StateActive},
			{Shard: 1, Server: "a", State: router.StateActive},
			{Shard: 2, Server: "a", State: router.StateActive},
			{Shard: 3, Server: "a", State: router.StateActive},
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := rebalance.Plan(snap, map[int]int64{0: 100, 1: 100, 2: 100, 3: 100}, rebalance.PlanOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	moved := map[string]int{}
	for _, p := range plan {
		moved[p.From+"→"+p.To]++
	}
	fmt.Println(len(plan), "moves:", moved)
	// Output: 2 moves: map[a→b:2]
}
