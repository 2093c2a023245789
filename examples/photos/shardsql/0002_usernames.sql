-- Version 2: an optional username per user, unique across all shards.
-- The plugin keeps users_username_lookup (username → user ID) for the
-- column tagged shard:"lookup": the row for a username lives in the shard
-- plugin.LookupShard(username) names, not in the user's own shard. Users
-- made before this version have no username (NULL), and no lookup row.
ALTER TABLE users ADD COLUMN username text;

CREATE TABLE users_username_lookup (
    value    text   PRIMARY KEY,
    owner_id bigint NOT NULL
);
