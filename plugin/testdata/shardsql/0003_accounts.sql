-- Accounts: a model keyed by its own ID (shard:"id" on the primary key),
-- as the example's users are.
CREATE TABLE accounts (
    id   bigint PRIMARY KEY DEFAULT next_id(),
    name text   NOT NULL DEFAULT ''
);
