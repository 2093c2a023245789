-- The scale harness's one per-shard table: a row per write of an app
-- process, keyed by an ID with the shard of its user.
CREATE TABLE items (
    id      bigint PRIMARY KEY DEFAULT next_id(),
    user_id bigint NOT NULL,
    proc    integer NOT NULL,
    body    text NOT NULL
);
