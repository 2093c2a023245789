-- shardkit catalog, version 8: a slot lease may hold fewer sequence values than a whole slot.
-- A lease of `bits` bits fixes the low `bits` bits of every sequence it issues: bits = slot_bits
-- is a whole slot (slots 1..2^slot_bits-1, as before), wider values split a slot into parts, so
-- up to (2^slot_bits-1) * 2^(seq_bits-slot_bits) processes (1008 with Instagram's layout) can
-- issue IDs at once. Two leases overlap when one's low bits contain the other's; the Leaser
-- never lets overlapping leases be live together. The rows leased so far are whole slots.

ALTER TABLE shardkit.slot_leases ADD COLUMN bits smallint;
UPDATE shardkit.slot_leases SET bits = (SELECT slot_bits FROM shardkit.config);
ALTER TABLE shardkit.slot_leases ALTER COLUMN bits SET NOT NULL;
ALTER TABLE shardkit.slot_leases DROP CONSTRAINT slot_leases_pkey;
ALTER TABLE shardkit.slot_leases ADD PRIMARY KEY (bits, slot);
ALTER TABLE shardkit.slot_leases ADD CONSTRAINT slot_leases_bits CHECK (bits BETWEEN 1 AND 30 AND slot < (1 << bits));
