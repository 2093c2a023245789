-- Version 3: each follow is kept on both users' shards. follows (on the
-- follower's shard) answers "whom does X follow"; followers (on the
-- followee's shard) answers "who follows Y". Both rows are written and
-- deleted in one atomic transaction (plugin.Atomic), so the two lists never
-- disagree. Follows made before this version have no followers row.
CREATE TABLE followers (
    id          bigint PRIMARY KEY DEFAULT next_id(),
    followee_id bigint NOT NULL,
    follower_id bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
