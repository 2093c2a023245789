// Package idgen makes and reads shardkit IDs: Instagram's 64-bit layout
//
//	[41 bits: ms since the epoch][13 bits: logical shard][10 bits: sequence]
//
// with the sequence split again into [counter | slot], so that application
// processes, each holding a leased slot, and the database's own next_id()
// (slot 0) never issue the same ID. It uses the standard library only.
//
// Reading an ID:
//
//	l := idgen.DefaultLayout()
//	p, err := l.Decode(id) // p.Shard, p.Time, p.Slot, ...
//
// Issuing IDs, with a slot leased from the catalog (catalog.NewLeaser) and
// renewed in the background:
//
//	g, stop, err := idgen.Start(ctx, layout, leaser, idgen.Config{})
//	if errors.Is(err, idgen.ErrNoFreeSlot) {
//		// leave primary keys to the database's DEFAULT next_id()
//	}
//	defer stop()
//	id, err := g.Next(ctx, shard)
//
// A Generator counts per (shard, ms) inside its slot: 2^CounterBits IDs per
// ms per shard (16 by default). A burst may borrow up to Config.MaxBorrow of
// future milliseconds; beyond that Next waits. It never issues an ID at or
// below one it issued before for the same shard, never one at or below the
// slot's previous holder's high-water mark, and never one after its lease's
// local deadline (ErrLeaseExpired). Clock regressions up to
// Config.MaxClockRegression are waited out; larger ones return
// ErrClockMovedBackwards.
//
// Bulk work on one shard (an import) goes past one slot's share with Fill
// or NextN: a generator made by Start leases extra slots on demand (up to
// Config.BulkSlots, 20 by default: 320 IDs per ms per shard) and releases
// them when the work stops; see Fill.
package idgen
