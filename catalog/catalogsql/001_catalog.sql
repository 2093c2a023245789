-- shardkit catalog, version 1: configuration, servers, the shard map, slot leases.
-- Applied once by router.MigrateCatalog inside a transaction; recorded in shardkit.catalog_version.

CREATE TABLE shardkit.config (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shards      integer NOT NULL CHECK (shards > 0),
    epoch_ms    bigint  NOT NULL CHECK (epoch_ms >= 0),
    time_bits   smallint NOT NULL CHECK (time_bits > 0),
    shard_bits  smallint NOT NULL CHECK (shard_bits > 0),
    seq_bits    smallint NOT NULL CHECK (seq_bits > 0),
    slot_bits   smallint NOT NULL CHECK (slot_bits >= 0 AND slot_bits < seq_bits),
    map_version bigint  NOT NULL DEFAULT 1,
    CHECK (time_bits + shard_bits + seq_bits = 63),
    CHECK (shards <= (1 << shard_bits))
);

CREATE TABLE shardkit.servers (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    dsn        text NOT NULL,
    replicas   text[] NOT NULL DEFAULT '{}',
    state      text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'retired')),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shardkit.shard_map (
    shard      integer PRIMARY KEY CHECK (shard >= 0),
    server     text NOT NULL REFERENCES shardkit.servers (name),
    state      text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'moving', 'fenced')),
    version    bigint NOT NULL,            -- map version at which this row last changed
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shard_map_server ON shardkit.shard_map (server);

-- Slot leases: slot 0 is the database's next_id() and never leased.
CREATE TABLE shardkit.slot_leases (
    slot       integer PRIMARY KEY CHECK (slot > 0),
    holder     text,                       -- NULL: free
    expires_at timestamptz,                -- catalog clock
    hwm_ms     bigint NOT NULL DEFAULT 0,  -- unix ms no earlier holder's IDs reach past
    leased_at  timestamptz
);

-- Routers LISTEN on shardkit_map; a bump of map_version tells them to reload.
CREATE FUNCTION shardkit.notify_map() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('shardkit_map', NEW.map_version::text);
    RETURN NEW;
END $$;

CREATE TRIGGER config_map_version AFTER UPDATE OF map_version ON shardkit.config
    FOR EACH ROW WHEN (OLD.map_version IS DISTINCT FROM NEW.map_version)
    EXECUTE FUNCTION shardkit.notify_map();
