-- shardkit on a shard server, version 3: each applied per-shard step records the SHA-256 of
-- the SQL it ran. A Migrate that failed part-way leaves its new version applied on some
-- schemas and recorded nowhere else; the checksum tells a retry with the same file (which
-- finishes the job) from one with an edited file (which would leave the schemas different).
-- Steps applied before this version have none.

ALTER TABLE shardkit.shard_migrations ADD COLUMN sha256 text;
