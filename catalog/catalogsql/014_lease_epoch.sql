-- shardkit catalog, version 14: the slot leases remember the catalog's history. A catalog that
-- fails over to a standby that had not received its last commits (or is restored from a backup)
-- may have lost lease grants whose holders still issue IDs; its rows then show those slots free.
-- The one row here records the history (system identifier and timeline, as
-- catalog.sqlCatalogEpoch reads it) the last grant was made in, and the longest TTL and bound
-- (TTL + MaxBorrow, ms) any grant used. A grant that finds another history grants nothing until
-- hold_until (now + the longest TTL: every lease it may have lost has then expired, and its
-- holders, whose renewals fail, have stopped) and gives every later lease a floor of floor_ms
-- (now + the longest bound: past any ID those holders may have issued ahead).

CREATE TABLE shardkit.lease_epoch (
    only_row     boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    epoch        text NOT NULL,
    hold_until   timestamptz,
    floor_ms     bigint NOT NULL DEFAULT 0,
    max_ttl_ms   bigint NOT NULL DEFAULT 0,
    max_bound_ms bigint NOT NULL DEFAULT 0
);
INSERT INTO shardkit.lease_epoch (epoch)
SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||
    CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END;

-- The application role takes leases: it reads and writes the row (GrantApp grants it on new
-- catalogs; here, on catalogs provisioned before this version).
DO $$
DECLARE r text;
BEGIN
    SELECT app_role INTO r FROM shardkit.config;
    IF r IS NOT NULL AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
        EXECUTE format('GRANT SELECT, UPDATE ON shardkit.lease_epoch TO %I', r);
    END IF;
END $$;
