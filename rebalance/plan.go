package rebalance

import (
	"fmt"
	"sort"

	"github.com/shardkit/shardkit/router"
)

// PlannedMove is one move of a rebalancing plan.
type PlannedMove struct {
	Shard int
	From  string
	To    string
	Size  int64 // the shard's size in the plan's measure (bytes or rows)
}

// PlanOptions configure Plan.
type PlanOptions struct {
	// Servers are the servers to balance over. nil means every server of
	// the snapshot whose state is "active" (a new, empty server included).
	// Shards on servers outside this list are moved onto it.
	Servers []string
	// MaxMoves caps the plan's length. 0 means no cap.
	MaxMoves int
}

// Plan returns moves that even out the servers' load, where a shard's load
// is sizes[shard] (bytes or rows; a missing shard counts 1, so a plan can be
// made on shard counts alone). Greedy: repeatedly move from the most to the
// least loaded server the shard that best halves their difference, while
// that strictly narrows it. Shards not active in the snapshot (moving,
// fenced) stay where they are. Plan is pure: it reads nothing else.
func Plan(snap *router.Snapshot, sizes map[int]int64, opts PlanOptions) ([]PlannedMove, error) {
	servers := opts.Servers
	if servers == nil {
		for _, s := range snap.Servers() {
			if s.State == "" || s.State == "active" {
				servers = append(servers, s.Name)
			}
		}
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("shardkit: plan: no servers to balance over")
	}
	load := map[string]int64{}
	on := map[string][]int{}
	for _, name := range servers {
		if _, ok := snap.Server(name); !ok {
			return nil, fmt.Errorf("shardkit: plan: server %q: %w", name, router.ErrUnknownServer)
		}
		load[name] = 0
	}
	size := func(shard int) int64 {
		if v, ok := sizes[shard]; ok && v > 0 {
			return v
		}
		return 1
	}
	var plan []PlannedMove
	for _, p := range snap.Placements() {
		if _, ok := load[p.Server]; !ok {
			if p.State != router.StateActive {
				continue
			}
			// Evacuate servers outside the set onto the least loaded one.
			to := lightest(servers, load)
			plan = append(plan, PlannedMove{Shard: p.Shard, From: p.Server, To: to, Size: size(p.Shard)})
			load[to] += size(p.Shard)
			continue
		}
		load[p.Server] += size(p.Shard)
		if p.State == router.StateActive {
			on[p.Server] = append(on[p.Server], p.Shard)
		}
	}
	for opts.MaxMoves == 0 || len(plan) < opts.MaxMoves {
		hi, lo := heaviest(servers, load), lightest(servers, load)
		gap := load[hi] - load[lo]
		best, bestIdx := int64(-1), -1
		for i, s := range on[hi] {
			sz := size(s)
			if sz >= gap { // would not narrow the gap
				continue
			}
			// The new gap between the two is |gap - 2*sz|: smaller is better.
			// Ties go to the smaller shard: cheaper to move.
			if d := abs(gap - 2*sz); best < 0 || d < best || (d == best && sz < size(on[hi][bestIdx])) {
				best, bestIdx = d, i
			}
		}
		if bestIdx < 0 {
			break
		}
		s := on[hi][bestIdx]
		on[hi] = append(on[hi][:bestIdx], on[hi][bestIdx+1:]...)
		on[lo] = append(on[lo], s)
		load[hi] -= size(s)
		load[lo] += size(s)
		plan = append(plan, PlannedMove{Shard: s, From: hi, To: lo, Size: size(s)})
	}
	return mergeChains(plan), nil
}

// mergeChains turns A→B then B→C of one shard into A→C.
func mergeChains(plan []PlannedMove) []PlannedMove {
	idx := map[int]int{}
	var out []PlannedMove
	for _, m := range plan {
		if i, ok := idx[m.Shard]; ok {
			out[i].To = m.To
			continue
		}
		idx[m.Shard] = len(out)
		out = append(out, m)
	}
	kept := out[:0]
	for _, m := range out {
		if m.From != m.To {
			kept = append(kept, m)
		}
	}
	return kept
}

func heaviest(servers []string, load map[string]int64) string {
	best := servers[0]
	for _, s := range servers[1:] {
		if load[s] > load[best] {
			best = s
		}
	}
	return best
}

func lightest(servers []string, load map[string]int64) string {
	best := servers[0]
	for _, s := range servers[1:] {
		if load[s] < load[best] {
			best = s
		}
	}
	return best
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Loads returns each server's total load under sizes, for printing a plan's
// before and after.
func Loads(snap *router.Snapshot, sizes map[int]int64, plan []PlannedMove) (before, after map[string]int64) {
	before, after = map[string]int64{}, map[string]int64{}
	for _, s := range snap.Servers() {
		before[s.Name], after[s.Name] = 0, 0
	}
	dest := map[int]string{}
	for _, m := range plan {
		dest[m.Shard] = m.To
	}
	for _, p := range snap.Placements() {
		sz := sizes[p.Shard]
		if sz <= 0 {
			sz = 1
		}
		before[p.Server] += sz
		to := p.Server
		if d, ok := dest[p.Shard]; ok {
			to = d
		}
		after[to] += sz
	}
	return before, after
}

// sortPlan orders a plan largest first, so long moves start early.
func sortPlan(plan []PlannedMove) {
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].Size > plan[j].Size })
}
