-- shardkit catalog, version 3: the application's per-shard SQL, as applied.
-- Provision and Migrate record each NNNN_name.sql (part 'tables') and
-- NNNN_name.indexes.sql (part 'indexes') here before applying it, and refuse
-- a file whose content differs from the recorded one. Tools that create a
-- shard schema without the application's files at hand (the shard mover)
-- read them from here (migrations.CatalogSQL).
CREATE TABLE shardkit.shard_sql (
    version     integer NOT NULL CHECK (version > 0),
    part        text    NOT NULL CHECK (part IN ('tables', 'indexes')),
    name        text    NOT NULL,
    body        text    NOT NULL,
    sha256      text    NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (version, part)
);
