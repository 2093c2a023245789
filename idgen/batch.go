package idgen

import (
	"context"
	"fmt"
)

// NextN returns n new IDs for a logical shard, in increasing order.
func (g *Generator) NextN(ctx context.Context, shard, n int) ([]int64, error) {
	if n < 0 {
		return nil, fmt.Errorf("shardkit: %w: NextN of %d IDs", ErrOutOfRange, n)
	}
	ids := make([]int64, n)
	if err := g.Fill(ctx, shard, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

// Fill fills ids with new IDs for a logical shard, in increasing order,
// reserving a whole run of counters of one millisecond at a time.
func (g *Generator) Fill(ctx context.Context, shard int, ids []int64) error {
	if uint(shard) >= uint(len(g.shards)) {
		return g.shardError(shard)
	}
	st := &g.shards[shard]
	for len(ids) > 0 {
		ms, lim, l, err := g.window(ctx)
		if err != nil {
			return err
		}
		old := st.Load()
		if old&sealed != 0 {
			return fmt.Errorf("shardkit: %w", ErrClosed)
		}
		nms, first := g.successor(old, ms)
		if nms > lim.limit {
			if err := g.waitFor(ctx, nms, lim); err != nil {
				return err
			}
			continue
		}
		k := min(uint64(len(ids)), g.cmask+1-first)
		if !st.CompareAndSwap(old, uint64(nms)<<g.cbits|(first+k-1)) {
			continue
		}
		base := g.compose(nms, shard, first, l.Slot)
		for i := range k {
			ids[i] = base + int64(i)<<g.layout.SlotBits
		}
		ids = ids[k:]
	}
	return nil
}
