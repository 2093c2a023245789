// Package backup dumps one logical shard to a file and restores it, with
// Postgres's own tools (pg_dump, pg_restore, psql).
//
// # Dump and restore
//
//	m, err := backup.Dump(ctx, cat, 42, f, backup.DumpOptions{})
//	// later, into the shard's home (fenced, replacing the schema):
//	res, err := backup.Restore(ctx, cat, f, backup.RestoreOptions{Replace: true})
//	// or into a scratch database, for inspection:
//	res, err := backup.Restore(ctx, cat, f, backup.RestoreOptions{Into: scratchDSN})
//
// [Dump] writes a [Manifest] (the shard, its per-shard SQL versions, its
// sequences, each table's row count and checksum, the ID layout) and a
// pg_dump custom-format archive of the shard's schema, both read from one
// snapshot on the shard's home, while writes go on. [ReadHeader] reads the
// manifest back.
//
// [Restore] runs in one transaction on the target: it drops the schema it
// replaces, replays the archive, records the SQL versions, checks every
// table's count and checksum against the manifest (a mismatch rolls
// everything back: [ErrChecksumMismatch]), and carries every sequence past
// the dump's value, the replaced schema's value and, for id_seq, the newest
// restored ID, so next_id() never issues an ID at or below one the dump or
// the replaced schema held.
//
// # Restoring over the shard's home
//
// A restore into the shard's home replaces every row written since the
// dump, so it needs [RestoreOptions.Replace] ([ErrNotConfirmed] without
// it). The shard is fenced in the map meanwhile (routers hold its writes)
// and active again afterwards, whether the restore committed or not. A
// shard that is moving is refused ([ErrShardBusy]).
//
// # Tools
//
// pg_dump, pg_restore and psql come from [DumpOptions.PGBin] or
// [RestoreOptions.PGBin], $SHARDKIT_PG_BIN, the newest
// /usr/lib/postgresql/*/bin, or $PATH ([ErrNoTools] when none is found);
// pg_dump must be at least the server's major version. Checksums compare
// each row's text form, so restore into the same PostgreSQL major version.
//
// The package depends on catalog, migrations (the server's shardkit
// objects), router and idgen; nothing in shardkit depends on it but
// shardctl. The manual is docs/operations.md in the repository.
package backup
