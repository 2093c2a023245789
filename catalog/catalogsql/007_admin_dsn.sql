-- shardkit catalog, version 7: each server has two DSNs.
-- dsn is what application traffic uses, and may name a connection pooler in
-- transaction mode; admin_dsn is what administration and logical
-- replication use (moves, provisioning, migrations, backups), which need a
-- direct connection: a subscription's replication connection, session
-- locks and session settings do not pass a transaction pooler.
-- NULL means the server has one DSN for both, as every server had before.

ALTER TABLE shardkit.servers ADD COLUMN admin_dsn text CHECK (admin_dsn <> '');
