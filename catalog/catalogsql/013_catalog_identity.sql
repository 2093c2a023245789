-- shardkit catalog, version 13: the catalog's identity. A random id made once, when the catalog
-- is created (or migrated to this version), that every map a relay serves carries: a client that
-- knows the catalog it expects refuses a map of another catalog. The application role reads it
-- with the configuration row.

ALTER TABLE shardkit.config ADD COLUMN catalog_id uuid NOT NULL DEFAULT gen_random_uuid();
