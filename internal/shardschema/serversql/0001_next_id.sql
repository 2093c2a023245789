-- shardkit on a shard server, version 1: the layout this server's IDs use,
-- the per-schema migration record, and the in-database ID generator.
-- Rendered with text/template: the double-brace values are integers from the
-- catalog's layout (never identifiers); applied once per server in a
-- transaction and recorded in shardkit.server_migrations.

CREATE TABLE shardkit.server_layout (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch_ms   bigint   NOT NULL,
    time_bits  smallint NOT NULL,
    shard_bits smallint NOT NULL,
    seq_bits   smallint NOT NULL,
    slot_bits  smallint NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO shardkit.server_layout (epoch_ms, time_bits, shard_bits, seq_bits, slot_bits)
VALUES ({{.EpochMs}}, {{.TimeBits}}, {{.ShardBits}}, {{.SeqBits}}, {{.SlotBits}});

-- One row per (shard schema, version, part) applied on this server.
-- Version 0 is shardkit's own per-shard template (sequence and next_id()).
CREATE TABLE shardkit.shard_migrations (
    schema_name text     NOT NULL CHECK (schema_name ~ '^shard_[0-9]{4,5}$'),
    version     integer  NOT NULL CHECK (version >= 0),
    part        text     NOT NULL CHECK (part IN ('tables', 'indexes')),
    name        text     NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, version, part)
);

-- shardkit.next_id returns a new ID for a logical shard from that shard's
-- sequence, in the catalog's layout, with slot 0 (application processes use
-- slots 1..2^slot_bits-1, so the two never collide).
--
-- The sequence holds a hybrid value h = ms_since_epoch * 2^counter_bits + counter.
-- Under a per-shard session advisory lock, h moves up to the clock when it
-- has fallen behind, else it just counts: so IDs stay unique for any number
-- of rows per millisecond (they run ahead of the clock during a burst) and
-- across clock regressions (the sequence never goes backwards). Moving a
-- shard carries the sequence's last_value, which is h.
--
-- The lock is a session lock (a transaction lock would serialise every
-- writer of the shard until commit); the handler releases it on any error,
-- including a cancel, and only if this session holds it.
CREATE FUNCTION shardkit.next_id(shard integer, seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    v bigint;
    t bigint;
BEGIN
    BEGIN
        PERFORM pg_advisory_lock({{.LockKey}}, shard);
        v := nextval(seq);
        t := (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - {{.EpochMs}}) << {{.CounterBits}};
        IF v < t THEN
            PERFORM setval(seq, t, true);
            v := t;
        END IF;
        PERFORM pg_advisory_unlock({{.LockKey}}, shard);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_locks
                   WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                     AND classid = {{.LockKey}}::oid AND objid = shard::oid AND objsubid = 2) THEN
            PERFORM pg_advisory_unlock({{.LockKey}}, shard);
        END IF;
        RAISE;
    END;
    RETURN ((v >> {{.CounterBits}}) << {{.ShardSeqBits}})
         | (shard::bigint << {{.SeqBits}})
         | ((v & {{.CounterMask}}) << {{.SlotBits}});
END $$;
