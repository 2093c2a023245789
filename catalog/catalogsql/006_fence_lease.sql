-- shardkit catalog, version 6: a move's fence is a lease.
-- fence_until is when the fence of a shard lapses, on the catalog's clock
-- (set by the move that fenced it: now() + rebalance.Config.FenceLease;
-- NULL when the shard is not fenced, or fenced by an offline move, which
-- holds its fence until it is resumed or rolled back). Past it, a fence
-- watcher (rebalance.Mover.WatchFences) asks the shard's server, whose
-- write barrier carries its own deadline, and either completes the flip
-- (the cutover had sealed the barrier) or lets writes in again.

ALTER TABLE shardkit.shard_map ADD COLUMN fence_until timestamptz;
