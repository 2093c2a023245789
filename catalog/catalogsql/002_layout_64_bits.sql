-- shardkit catalog, version 2: an ID layout fills all 64 bits of a bigint, as Instagram's does
-- (41 + 13 + 10); the top time bit is the sign bit and stays 0. Version 1 wrongly required 63,
-- which refused the default layout.

DO $$
DECLARE c text;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'shardkit.config'::regclass AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%= 63%'
    LOOP
        EXECUTE format('ALTER TABLE shardkit.config DROP CONSTRAINT %I', c);
    END LOOP;
END $$;

ALTER TABLE shardkit.config ADD CONSTRAINT config_layout_bits CHECK (time_bits > 1 AND time_bits + shard_bits + seq_bits = 64);
