-- Members: a model keyed by its own ID with two lookup columns
-- (shard:"lookup"), unique across all shards. Each lookup table holds
-- value → owner ID, in the shard plugin.LookupShard gives the value.
CREATE TABLE members (
    id       bigint PRIMARY KEY DEFAULT next_id(),
    username text   NOT NULL,
    email    text,
    name     text   NOT NULL DEFAULT ''
);

CREATE TABLE members_username_lookup (
    value    text   PRIMARY KEY,
    owner_id bigint NOT NULL
);

CREATE TABLE members_email_lookup (
    value    text   PRIMARY KEY,
    owner_id bigint NOT NULL
);
