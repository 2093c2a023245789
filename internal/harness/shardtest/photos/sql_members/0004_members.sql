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

-- Handles: a model keyed by a user, with a lookup column; its IDs may
-- come from the shard's next_id().
CREATE TABLE handles (
    id      bigint PRIMARY KEY DEFAULT next_id(),
    user_id bigint NOT NULL,
    handle  text   NOT NULL
);

CREATE TABLE handles_handle_lookup (
    value    text   PRIMARY KEY,
    owner_id bigint NOT NULL
);
