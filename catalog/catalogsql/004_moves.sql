-- shardkit catalog, version 4: the move journal (package rebalance).
-- One row per move of a logical shard. The mover records each step before
-- (doing) and after (step) it runs, so a killed mover can be resumed or
-- rolled back; lsn/sequence values needed to resume live in the row too.

CREATE TABLE shardkit.moves (
    id          bigserial PRIMARY KEY,
    shard       integer NOT NULL CHECK (shard >= 0),
    source      text NOT NULL REFERENCES shardkit.servers (name),
    target      text NOT NULL REFERENCES shardkit.servers (name),
    mode        text NOT NULL DEFAULT 'online' CHECK (mode IN ('online', 'offline')),
    -- running: steps going forward; reversible: cut over, reverse replication
    -- kept for rollback; rolling_back; completed; rolled_back.
    state       text NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'reversible', 'rolling_back', 'completed', 'rolled_back')),
    step        text NOT NULL DEFAULT 'created', -- last step finished
    doing       text,                            -- step under way (NULL: none)
    error       text,                            -- last error, cleared by the next successful step
    final_lsn   pg_lsn,                          -- serving side's WAL position captured with the write barrier
    target_lsn  pg_lsn,                          -- target's WAL position once it applied final_lsn: reverse replication starts there
    seq_value   bigint,                          -- largest sequence value carried to the other side
    fenced_ms   double precision,                -- length of the fenced window at cutover
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CHECK (source <> target)
);

-- At most one unfinished move per shard.
CREATE UNIQUE INDEX moves_open_shard ON shardkit.moves (shard)
    WHERE state IN ('running', 'reversible', 'rolling_back');
