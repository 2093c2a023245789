-- shardkit catalog, version 12: the servers as an application reads them. The application role
-- may not read admin_dsn (version 11 grants it every column but that one), and needs only to
-- know whether a server has an admin DSN apart from its app DSN (when not, its app DSN reaches
-- the server itself, not a pooler). The view runs with its owner's privileges, the operator's.

CREATE VIEW shardkit.servers_app AS
    SELECT name, dsn, admin_dsn IS NULL AS direct, replicas, state, primary_system_id, primary_timeline
    FROM shardkit.servers;
