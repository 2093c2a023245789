// Package idgen makes and reads shardkit IDs: Instagram's 64-bit layout
//
//	[41 bits: ms since the epoch][13 bits: logical shard][10 bits: sequence]
//
// with the sequence split again into [counter | slot], so that application
// processes, each holding a leased slot, and the database's own next_id()
// (slot 0) never issue the same ID. It uses the standard library only.
//
// # Reading and composing IDs
//
// A [Layout] holds the field widths and the epoch; [DefaultLayout] is
// Instagram's (41/13/10 bits, epoch 2011-08-24T21:07:01.721Z) with 6 slot
// bits. [Layout.Decode] splits an ID into its [Parts], [Layout.Compose]
// builds one, [Layout.ShardOf] reads only the shard:
//
//	l := idgen.DefaultLayout()
//	p, err := l.Decode(id) // p.Shard, p.Time, p.Slot, ...
//
// # Issuing IDs
//
// A [Generator] issues IDs from a slot it holds. [Start] leases the slot
// through a [Leaser] and renews it in the background; services lease from
// the catalog (catalog.StartGenerator), tests and single processes may use
// a [StaticLeaser]:
//
//	g, stop, err := idgen.Start(ctx, layout, leaser, idgen.Config{})
//	if errors.Is(err, idgen.ErrNoFreeSlot) {
//		// leave primary keys to the database's DEFAULT next_id()
//	}
//	defer stop()
//	id, err := g.Next(ctx, shard)
//
// A Generator counts per (shard, ms) inside its slot: 2^(SeqBits-SlotBits) IDs per
// ms per shard (16 by default). A burst may borrow up to [Config.MaxBorrow]
// of future milliseconds; beyond that [Generator.Next] waits.
//
// # More processes than slots
//
// A lease may fix more low sequence bits than a slot's ([Lease.Bits], up
// to SeqBits): it is then a part of a slot, and (2^SlotBits-1) *
// 2^(Bits-SlotBits) parts exist (1008 of 10 bits with the default layout,
// one ID per ms per shard each). Parts never end in slot 0's bits, so the
// database's next_id() is untouched, and IDs decode as before. A leaser
// must never hand out two overlapping leases (one's bits the low bits of
// the other's) live at once; catalog.Leaser does not.
//
// # Why IDs are unique
//
// A Generator never issues an ID at or below one it issued before for the
// same shard, never one at or below the slot's previous holder's high-water
// mark, and never one after its lease's local deadline ([ErrLeaseExpired]).
// Clock regressions up to [Config.MaxClockRegression] are waited out;
// larger ones return [ErrClockMovedBackwards].
//
// # Bulk work on one shard
//
// Bulk work on one shard (an import) goes past one slot's share with
// [Generator.Fill] or [Generator.NextN]: a generator made by Start leases
// extra slots on demand (up to [Config.BulkSlots], 20 by default: 320 IDs
// per ms for one shard) and releases them after [Config.BulkIdle] without
// bulk work. Batches spread over many shards never lease extra slots.
package idgen
