// Package rebalance moves logical shards between servers while the
// application keeps writing, verifies both copies, rolls moves back, and
// plans moves that even out the servers.
//
// # Moving a shard
//
// A [Mover] runs moves recorded in the catalog's journal:
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
// Every step is recorded in the catalog before and after it runs, and every
// step is idempotent, so a killed mover is resumed ([Mover.Resume]) or
// rolled back ([Mover.Rollback]) from the journal. A failed move returns a
// [*MoveError]. [ActiveMoves] lists unfinished moves for `shardctl status`.
//
// # The steps of an online move
//
// An online move needs PostgreSQL 15+ with wal_level=logical on both
// servers.
//
//  0. Preflight, changing nothing ([Mover.Preflight] runs it alone, for a
//     dry run): wal_level, replica identities, free slots, WAL senders and
//     workers on both sides, per-shard SQL versions, no schema on the
//     target, and a rehearsal of the target's schema (per-shard SQL plus the
//     objects made outside it, with their owners, privileges and comments)
//     in a transaction rolled back. Any failure is a [*MoveError] and
//     nothing else happens.
//  1. A journal row in the catalog (shardkit.moves).
//  2. The shard map marks the shard moving.
//  3. The target gets the schema and tables, without keys, indexes or
//     triggers yet, and the objects of the source's schema that its
//     per-shard SQL did not make (tables, columns, sequences, views,
//     functions), from the source's own definitions.
//  4. The copy. A publication FOR TABLES IN SCHEMA on the source; on a
//     replication connection, the forward slot is created exporting its
//     snapshot, and a few transactions that import that snapshot stream the
//     tables with binary COPY into COPY FREEZE on the target (a killed copy
//     starts again from a new slot). Then, as pg_dump's restore does, the
//     primary keys and indexes are built from the sorted rows, several at
//     once, and the foreign keys, exclusion constraints and triggers are
//     added; both schemas must then hold the same objects. Only then comes
//     a subscription without copy (copy_data off, the slot made above): it
//     applies from the slot's consistent point, which is the copy's
//     snapshot, so nothing is lost or applied twice. The step ends when the
//     replication lag is small.
//  5. A publication and slot on the target, for reverse replication.
//  6. The cutover (next section).
//  7. The forward subscription is dropped; the reverse slot is advanced to
//     the target position captured at the cutover, and a subscription on
//     the source follows the target, so [Mover.Rollback] can cut the shard
//     back.
//  8. [Mover.Complete] drops the reverse subscription, slots, publications
//     and the old schema.
//
// # The cutover
//
// Cutovers run one at a time per Mover:
//
//  1. Before the fence, the schema's sequences go to the target: their
//     values read on the source plus twice [Config.SequenceMargin], with a
//     reading of the target's clock.
//  2. A lag gate waits until a catalog round trip plus the target's
//     confirmation of a freshly flushed probe take at most
//     [Config.CutoverLag].
//  3. The fence: the map fences the shard (the plugin holds writes,
//     bounded; the journal is updated in the same statement).
//  4. The barrier, sent at the same time and committed once the fence is:
//     one statement on the source locks every table (waiting at most
//     [Config.BarrierWait] for running writes, else the attempt is unfenced
//     and retried), turns the statement triggers installed beforehand into
//     ones that raise [router.FenceSQLState] (SK001)
//     until a deadline on the source's clock, [Config.FenceLease] away, and
//     reads the final WAL position, the sequences and the newest ID. The
//     apply worker of logical replication runs as a replica and does not
//     fire those triggers.
//  5. The mover waits for the target to confirm the final position; on
//     timeout the barrier is released and the shard unfenced. Only if a
//     final last_value is past what step 1 allowed for are the sequences
//     carried again meanwhile (last_value plus a margin).
//  6. If the target's clock is not yet past the newest ID's millisecond,
//     the mover waits until it is.
//  7. The seal: under the same locks, if the lease still holds on the
//     source's clock, the barrier refuses writes for good; otherwise the
//     move fails with [ErrCutoverAborted] and the map does not flip.
//  8. The flip: the map points the shard at the target (routers are
//     notified; the journal is updated in the same statement).
//
// The fenced window and each step's duration are recorded ([Move.FencedFor],
// [Move.Cutover]). The target's position where reverse replication starts
// is read after the flip from its subscription's replication origin.
//
// # Offline moves
//
// Without logical WAL, [MoveOptions.Offline] fences the shard, copies the
// tables the same way (without the slot), builds the keys and indexes,
// verifies, carries sequences and flips: the shard takes no writes for the
// whole copy, and the move is not reversible.
//
// # When a mover dies
//
// A mover killed inside the fenced window leaves a lease that lapses on its
// own: [Mover.WatchFences] (run it in every service, or `shardctl
// watch-fences`) then flips the map if the barrier was sealed, or releases
// the barrier and unfences the shard; the move stays resumable.
//
// # Planning
//
// [Plan] proposes moves that even out servers by bytes or rows
// ([Mover.Sizes]), onto new empty servers too; [Mover.Rebalance] runs a
// plan several moves at a time.
//
// The manual is docs/moves.md in the repository.
package rebalance
