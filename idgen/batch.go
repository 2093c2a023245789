package idgen

import (
	"context"
	"fmt"
	"time"
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
//
// When Fills keep one shard's IDs more than a few milliseconds ahead of the
// clock in the generator's own slot (sustained bulk work on one shard, not
// one batch), a generator made by Start leases extra slots in the
// background (up to Config.BulkSlots); while it holds them, a Fill of more
// IDs than one millisecond of a slot holds (2^CounterBits) takes whole
// milliseconds of every slot held, up to 2^SeqBits IDs per ms for the
// shard. Until the extra slots arrive, and when none is free, it goes on
// at its own slot's rate. Next always uses the own slot only.
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
		if len(ids) > int(l.cmax) && g.bulk.on() {
			// More than a millisecond of the own slot, with extra slots held.
			if n, ok := g.fillBulk(st, old, ms, lim, l, shard, ids); ok {
				ids = ids[n:]
				continue
			}
		}
		nms, first := g.successor(old, ms, l.cmax)
		if nms-lim.raw > bulkAheadMs && g.bulk.on() {
			// The shard runs ahead of the clock in the own slot: sustained
			// one-shard work, not a batch. Ask for extra slots.
			g.bulk.demand(time.Now())
		}
		if nms > lim.limit {
			if err := g.waitFor(ctx, nms, lim); err != nil {
				return err
			}
			continue
		}
		k := min(uint64(len(ids)), l.cmax+1-first)
		if !st.CompareAndSwap(old, uint64(nms)<<g.cbits|(first+k-1)) {
			continue
		}
		base := g.compose(nms, shard, first, l)
		for i := range k {
			ids[i] = base + int64(i)<<l.shift
		}
		ids = ids[k:]
	}
	return nil
}
