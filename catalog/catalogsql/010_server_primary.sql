-- shardkit catalog, version 10: each server records the cluster that is its primary.
-- A failover promotes a standby, which has the old primary's system identifier and a newer
-- timeline; an old primary that comes back keeps the old timeline. Routers use no host whose
-- system identifier and timeline are not these, so an old primary gets no write and serves no
-- read. NULL records nothing (servers registered before this version): no host is refused.

ALTER TABLE shardkit.servers ADD COLUMN primary_system_id text CHECK (primary_system_id ~ '^-?[0-9]+$');
ALTER TABLE shardkit.servers ADD COLUMN primary_timeline integer CHECK (primary_timeline > 0);
ALTER TABLE shardkit.servers ADD CONSTRAINT servers_primary_both
    CHECK ((primary_system_id IS NULL) = (primary_timeline IS NULL));
