// Package rebalance moves logical shards between servers while the
// application keeps writing, verifies both copies, rolls moves back, and
// plans moves that even out the servers.
//
//	mv, err := rebalance.New(rebalance.Config{Catalog: cat})
//	if err != nil { ... }
//	defer mv.Close()
//	m, err := mv.Move(ctx, 1341, "pg3", rebalance.MoveOptions{})
//	// m.State == rebalance.StateReversible: pg3 serves shard 1341, and the
//	// old copy is kept current by reverse replication.
//	if _, err := mv.Verify(ctx, 1341); err != nil { ... }
//	_, err = mv.Complete(ctx, 1341) // or mv.Rollback(ctx, 1341)
//
// An online move (PostgreSQL 15+, wal_level=logical on both servers):
//
//  0. Preflight, changing nothing (also on its own, for a dry run):
//     wal_level, replica identities, free slots, WAL senders and workers
//     on both sides, per-shard SQL versions, no schema on the target, and
//     a rehearsal of the target's schema (per-shard SQL plus the objects
//     made outside it) in a transaction rolled back; any failure is a
//     *PreflightError and nothing else happens;
//  1. journal row in the catalog (shardkit.moves); every step is recorded
//     before and after it runs, and every step is idempotent, so a killed
//     mover is resumed (Resume) or rolled back (Rollback) from the journal;
//  2. the shard map marks the shard moving;
//  3. the target gets the schema and tables, without keys, indexes or
//     triggers yet, and the objects of the source's schema that its
//     per-shard SQL did not make (tables, columns, sequences, views,
//     functions), from the source's own definitions;
//  4. a publication FOR TABLES IN SCHEMA on the source; on a replication
//     connection to the source, the forward slot is created exporting its
//     snapshot, and a few transactions that import that snapshot stream
//     the tables with binary COPY into COPY FREEZE on the target (a
//     killed copy starts again from a new slot); then, as pg_dump's
//     restore does, the primary keys and indexes are built from the
//     sorted rows, several at once, and the foreign keys, exclusion
//     constraints and triggers are added, and both schemas must hold the
//     same objects; only then a subscription without copy (copy_data
//     off, the slot made above): it applies from the slot's consistent
//     point, which is the copy's snapshot, so nothing is lost or applied
//     twice; wait until the replication lag is small;
//  5. a publication and slot on the target for reverse replication;
//  6. cutover, one at a time per Mover: the schema's sequences go to the
//     target, their values read on the source plus twice
//     Config.SequenceMargin, with a reading of the target's clock; a lag
//     gate waits until a catalog
//     round trip plus the target's confirmation of a freshly flushed
//     probe take at most Config.CutoverLag; then the fenced window, one
//     round trip per step: the map fences the shard (the plugin holds
//     writes, bounded; the journal is updated in the same statement) while,
//     at the same time, one statement on the source, committed once the
//     fence is, locks every table (waiting at most
//     Config.BarrierWait for running writes, else the attempt is unfenced
//     and retried), turns the statement triggers installed beforehand
//     into ones that raise router.FenceSQLState until a deadline on the
//     source's clock, Config.FenceLease away (the apply worker of
//     logical replication runs as a replica and does not fire them), and
//     reads the final WAL position, the sequences and the newest ID; the
//     mover waits for the target to confirm the final position (abort on
//     timeout: barrier released, shard unfenced) and, only if a final
//     last_value is past what the carry before the fence allowed for,
//     carries the sequences again meanwhile (last_value plus a margin);
//     a wait until
//     the target's clock is past the newest ID's millisecond, only if it
//     is not already; the barrier is sealed (same locks: if the lease
//     still holds, it refuses for good; else ErrFenceLapsed and no flip);
//     the map flips (routers are notified; journal in the same statement). The window and each step's duration are recorded
//     (Move.FencedFor, Move.Cutover); the target's position where reverse
//     replication starts is read after the flip from its subscription's
//     replication origin;
//  7. the forward subscription is dropped; the reverse slot is advanced to
//     the captured target position and a subscription on the source
//     follows the target, so Rollback can cut the shard back;
//  8. Complete drops the reverse subscription, slots, publications and the
//     old schema.
//
// Without logical WAL, MoveOptions.Offline fences the shard, copies the
// tables the same way (without the slot), builds the keys and indexes,
// verifies, carries sequences and flips: the shard takes no writes for the
// whole copy.
//
// Plan proposes moves that even out servers by bytes or rows (Sizes), onto
// new empty servers too; Rebalance runs a plan K moves at a time.
// ActiveMoves lists unfinished moves for `shardctl status`.
//
// A mover killed inside the fenced window leaves a lease that lapses on its
// own: Mover.WatchFences (run it in every service, or `shardctl
// watch-fences`) then flips the map if the barrier was sealed, or releases
// the barrier and unfences the shard; the move stays resumable.
package rebalance
