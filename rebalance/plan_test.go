package rebalance

import (
	"context"
	"testing"

	"github.com/shardkit/shardkit/router"
)

func snapshotOf(t *testing.T, servers []string, placement []string) *router.Snapshot {
	t.Helper()
	var srv []router.Server
	for _, s := range servers {
		srv = append(srv, router.Server{Name: s, State: "active"})
	}
	var ps []router.Placement
	for i, s := range placement {
		ps = append(ps, router.Placement{Shard: i, Server: s, State: router.StateActive})
	}
	snap, err := router.NewSnapshot(1, len(placement), srv, ps)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestPlan(t *testing.T) {
	rep := func(s string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cases := []struct {
		name      string
		servers   []string
		placement []string
		sizes     map[int]int64
		opts      PlanOptions
		moves     int
		maxSpread int64 // largest allowed difference between servers after the plan
	}{
		{"16 shards from 2 onto 4", []string{"a", "b", "c", "d"}, append(rep("a", 8), rep("b", 8)...), nil, PlanOptions{}, 8, 0},
		{"balanced stays", []string{"a", "b"}, []string{"a", "b", "a", "b"}, nil, PlanOptions{}, 0, 0},
		{"onto a new empty server", []string{"a", "b", "c"}, append(rep("a", 6), rep("b", 6)...), nil, PlanOptions{}, 4, 0},
		{"by size: one big shard", []string{"a", "b"}, []string{"a", "a", "a", "b"},
			map[int]int64{0: 100, 1: 10, 2: 10, 3: 10}, PlanOptions{}, 2, 70},
		{"cap", []string{"a", "b", "c", "d"}, append(rep("a", 8), rep("b", 8)...), nil, PlanOptions{MaxMoves: 3}, 3, 8},
		{"evacuate a server", []string{"a", "b", "c"}, []string{"a", "b", "c", "c"}, nil, PlanOptions{Servers: []string{"a", "b"}}, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := snapshotOf(t, c.servers, c.placement)
			plan, err := Plan(snap, c.sizes, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != c.moves {
				t.Errorf("plan has %d moves, want %d: %+v", len(plan), c.moves, plan)
			}
			_, after := Loads(snap, c.sizes, plan)
			lo, hi := int64(1<<62), int64(0)
			set := c.opts.Servers
			if set == nil {
				set = c.servers
			}
			for _, s := range set {
				lo, hi = min(lo, after[s]), max(hi, after[s])
			}
			if hi-lo > c.maxSpread {
				t.Errorf("after the plan loads are %v (spread %d > %d)", after, hi-lo, c.maxSpread)
			}
			seen := map[int]bool{}
			for _, m := range plan {
				if seen[m.Shard] || m.From == m.To {
					t.Errorf("bad move %+v in %+v", m, plan)
				}
				seen[m.Shard] = true
			}
		})
	}
}

func TestRebalanceTwoOntoFour(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 4, 2, 16) // shards 0-7 on s0, 8-15 on s1; s2, s3 empty
	for s := range 16 {
		seedPhotos(t, e, s, 200)
	}
	mv := e.mover(t, Config{})
	sizes, err := mv.Sizes(ctx, ByBytes)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(snap, sizes, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) < 7 || len(plan) > 9 {
		t.Fatalf("plan moves %d of 16 shards, want about half: %+v", len(plan), plan)
	}
	w := newRawWriter(t, e, []int{plan[0].Shard, plan[1].Shard, 15})
	stop := w.run(ctx)
	results, err := mv.Rebalance(ctx, plan, Options{Parallel: 2})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	w.check(t)
	per := map[string]int{}
	for _, r := range results {
		if _, err := mv.Verify(ctx, r.Planned.Shard); err != nil {
			t.Errorf("verify shard %d: %v", r.Planned.Shard, err)
		}
		if _, err := mv.Complete(ctx, r.Planned.Shard); err != nil {
			t.Errorf("complete shard %d: %v", r.Planned.Shard, err)
		}
		t.Logf("shard %d %s→%s fenced %v", r.Planned.Shard, r.Planned.From, r.Planned.To, r.Move.FencedFor)
	}
	snap, err = e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap.Servers() {
		per[s.Name] = len(snap.ShardsOn(s.Name))
	}
	for name, n := range per {
		if n != 4 {
			t.Errorf("after rebalance: %v shards per server, want 4 each (%s)", per, name)
			break
		}
	}
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
