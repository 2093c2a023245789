-- shardkit restore, part 1 of 3 (part 2 is pg_restore's script of the
-- dump, part 3 restore_end.sql). One transaction: nothing is visible, and
-- nothing is lost, unless all of it succeeds. Variables: schema, replace
-- (true: drop the schema being replaced), lock_timeout.
\set ON_ERROR_STOP on
BEGIN;
SET LOCAL lock_timeout = :'lock_timeout';
SELECT set_config('shardkit.restore_schema', :'schema', true) \gset restore_
-- The replaced schema's sequences: the restored ones are carried past them.
CREATE TEMP TABLE shardkit_restore_live ON COMMIT DROP AS
SELECT c.relname::text AS name, coalesce(pg_sequence_last_value(c.oid), 0) AS last_value
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = :'schema' AND c.relkind = 'S';
\if :replace
DROP SCHEMA IF EXISTS :"schema" CASCADE;
\endif
DELETE FROM shardkit.shard_migrations WHERE schema_name = :'schema';
