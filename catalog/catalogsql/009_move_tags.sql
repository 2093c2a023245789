-- shardkit catalog, version 9: each move has a random tag, part of its replication objects' names.
-- Replication slots are named per cluster, not per database, and move ids are per catalog: two
-- catalogs whose servers share a cluster (staging beside production, or two test runs) both
-- have a move 1 of shard 5, and their slots shardkit_fwd_5_1 would collide. Moves journalled
-- from this version on name their objects shardkit_<kind>_<shard>_<move>_<tag>; moves
-- journalled before keep the names they were made with (their tag is NULL).

ALTER TABLE shardkit.moves ADD COLUMN tag text CHECK (tag ~ '^[0-9a-f]{8}$');
ALTER TABLE shardkit.moves ALTER COLUMN tag SET DEFAULT substr(md5(random()::text || clock_timestamp()::text), 1, 8);
