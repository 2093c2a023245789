-- shardkit restore, part 3 of 3. Variables: schema, versions, tables,
-- sequences (JSON from the dump's manifest), shard_seq_bits, counter_bits.
-- The checksum's session settings (internal/rowsum, put here by backup/sql.go).
/*rowsum.Settings*/
INSERT INTO shardkit.shard_migrations (schema_name, version, part, name, applied_at)
SELECT :'schema', v.version, v.part, v.name, v.applied_at
FROM pg_catalog.jsonb_to_recordset(:'versions'::jsonb) AS v(version integer, part text, name text, applied_at timestamptz);
SELECT set_config('shardkit.restore_tables', :'tables', true),
       set_config('shardkit.restore_sequences', :'sequences', true),
       set_config('shardkit.restore_bits', :'shard_seq_bits' || ',' || :'counter_bits', true) \gset restore_
DO $restore$
DECLARE
    s    text := current_setting('shardkit.restore_schema');
    ssb  integer := split_part(current_setting('shardkit.restore_bits'), ',', 1)::integer;
    cb   integer := split_part(current_setting('shardkit.restore_bits'), ',', 2)::integer;
    t    record;
    n    bigint;
    sm   text;
    top  bigint := 0;
    v    bigint;
    want bigint;
BEGIN
    -- Every table of the dump, with the dump's rows.
    FOR t IN SELECT * FROM jsonb_to_recordset(current_setting('shardkit.restore_tables')::jsonb) AS x(name text, rows bigint, sum text) LOOP
        EXECUTE /*rowsum.Format(s, t.name)*/ INTO n, sm;
        IF n <> t.rows OR sm <> t.sum THEN
            RAISE EXCEPTION 'shardkit: restored table %.% has % rows (checksum %), the dump recorded % (checksum %)',
                s, t.name, n, sm, t.rows, t.sum USING ERRCODE = 'SK002';
        END IF;
    END LOOP;
    -- The newest restored ID.
    FOR t IN SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped AND a.atttypid = 'int8'::regtype
             WHERE ns.nspname = s AND c.relkind IN ('r', 'p') LOOP
        EXECUTE format('SELECT coalesce(max(id), 0) FROM %I.%I', s, t.relname) INTO v;
        top := greatest(top, v);
    END LOOP;
    -- Every sequence past the dump's value and the replaced schema's; id_seq
    -- also past the newest restored ID's millisecond (it holds ms·2^cb + counter).
    FOR t IN SELECT c.oid, c.relname::text AS name FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
             WHERE ns.nspname = s AND c.relkind = 'S' LOOP
        want := greatest(
            coalesce(pg_sequence_last_value(t.oid), 0),
            coalesce((SELECT l.last_value FROM pg_temp.shardkit_restore_live l WHERE l.name = t.name), 0),
            coalesce((SELECT x.last_value FROM jsonb_to_recordset(current_setting('shardkit.restore_sequences')::jsonb) AS x(name text, last_value bigint)
                      WHERE x.name = t.name), 0));
        IF t.name = 'id_seq' AND top > 0 THEN
            want := greatest(want, ((top >> ssb) + 1) << cb);
        END IF;
        IF want > 0 THEN
            PERFORM setval(t.oid::regclass, want, true);
        END IF;
    END LOOP;
END
$restore$;
SELECT last_value AS id_seq FROM :"schema".id_seq \gset restored_
\echo shardkit-restored-id-seq :restored_id_seq
COMMIT;
