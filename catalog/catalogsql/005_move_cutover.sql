-- shardkit catalog, version 5: where a move's fenced window went.
-- Per-step durations of the last cutover of a move (package rebalance,
-- rebalance.CutoverTimes as JSON, milliseconds): the lag gate before the
-- fence, then fence, barrier, apply, carry, clock and flip inside it.

ALTER TABLE shardkit.moves ADD COLUMN cutover jsonb;
