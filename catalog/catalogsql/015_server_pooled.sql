-- shardkit catalog, version 15: whether a server's application DSN reaches a connection pooler
-- or the server itself is recorded, not inferred from the DSNs. Until now a server with an admin
-- DSN apart from its app DSN counted as behind a pooler, so a server reached directly with a
-- login of the application role (its own user, another DSN) lost what the plugin runs only on
-- direct servers (named prepared reads). pooled is NULL where nothing is recorded (every row
-- before this version): readers then infer as before, direct when there is no admin DSN apart.
-- The version's step in Go (catalog.recordAppRoleLinks, after this file, in its transaction)
-- records direct the servers whose app DSN names their admin DSN's host, port and database with
-- another user: the application-role case, the one whose behaviour this version changes.
-- Registration (catalog.Tx.AddServer) and DSN changes (SetServerDSN) record it; shardctl server
-- set-dsn NAME --direct or --pooled sets it.

ALTER TABLE shardkit.servers ADD COLUMN pooled boolean;

-- The view keeps its columns (an older reader's statement still runs) and adds two: whether the
-- server has an admin DSN apart (which the application role may not read) and the record.
CREATE OR REPLACE VIEW shardkit.servers_app AS
    SELECT name, dsn, coalesce(NOT pooled, admin_dsn IS NULL) AS direct, replicas, state,
        primary_system_id, primary_timeline, admin_dsn IS NOT NULL AS admin_apart, pooled
    FROM shardkit.servers;
