-- shardkit catalog, version 16: a switchover's fence says so. switchover_until is set with
-- fence_until, to the same time, by catalog.Catalog.FenceServer (a switchover of the shard's
-- server: now() + failover.Options.Lease) and cleared by UnfenceServer. A shard whose fence is a
-- switchover's (state fenced, switchover_until = fence_until; a move that fences it later sets
-- fence_until alone) holds the plugin's writes until the lease lapses, not only for
-- plugin.Config.FenceWait: a switchover's steps (drain, replay, pg_promote, record, sessions) may
-- outlast a move's cutover, and its writes are to wait, not fail. Applications read the column
-- through their SELECT on shard_map.

ALTER TABLE shardkit.shard_map ADD COLUMN switchover_until timestamptz;
