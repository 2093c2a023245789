-- shardkit catalog, version 11: the application's role. Application processes log in as roles
-- that are members of this NOLOGIN group role; provisioning and migrations grant it what an
-- application needs on each shard schema's home copy and on the catalog, and a move's cutover
-- revokes it on the copy that stops being the home, so that a router with a stale map is
-- refused there for reads as well as writes.

ALTER TABLE shardkit.config ADD COLUMN app_role text NOT NULL DEFAULT 'shardkit_app'
    CHECK (app_role ~ '^[a-z_][a-z0-9_]{0,62}$');
