-- shardkit's per-shard template (recorded as version 0 of every shard schema).
-- Runs with search_path set to the shard's schema only, so every name below
-- lands in that schema; the double-brace value is the shard number, an integer.
--
-- id_seq holds the hybrid value described at shardkit.next_id. CACHE 1 is
-- required: a per-session cache would hand out values behind a setval and
-- break the "never goes backwards" rule the generator relies on.
CREATE SEQUENCE id_seq AS bigint MINVALUE 1 NO MAXVALUE CACHE 1 NO CYCLE;

-- next_id() is what the shard's tables use: id bigint PRIMARY KEY DEFAULT next_id().
-- The body is parsed now (BEGIN ATOMIC), so 'id_seq'::regclass is bound to
-- this schema's sequence whatever the caller's search_path.
CREATE FUNCTION next_id() RETURNS bigint LANGUAGE sql VOLATILE PARALLEL UNSAFE
BEGIN ATOMIC
    SELECT shardkit.next_id({{.Shard}}, 'id_seq'::regclass);
END;
