-- shardkit on a shard server, version 2: commit decisions of atomic
-- transactions across shards. The coordinator of a two-phase commit inserts
-- its decision row in its own local transaction, after every other
-- participant has prepared; that local commit is the commit decision. A
-- resolver reads a row to finish the prepared parts the coordinator's
-- transaction ID alone cannot decide (its status no longer known), and
-- deletes rows once no participant holds a prepared part of them.

CREATE TABLE shardkit.tx_decisions (
    gid text        PRIMARY KEY CHECK (gid LIKE 'shardkit:v1:%'),
    at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tx_decisions_at ON shardkit.tx_decisions (at);
