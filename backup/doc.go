// Package backup dumps one logical shard to a file and restores it, with
// Postgres's own tools (pg_dump, pg_restore, psql):
//
//	m, err := backup.Dump(ctx, cat, 42, f, backup.DumpOptions{})
//	// later, into the shard's home (fenced, replacing the schema):
//	res, err := backup.Restore(ctx, cat, f, backup.RestoreOptions{Replace: true})
//	// or into a scratch database, for inspection:
//	res, err := backup.Restore(ctx, cat, f, backup.RestoreOptions{Into: scratchDSN})
//
// A dump holds a manifest (the shard, its per-shard SQL versions, its
// sequences, each table's row count and checksum, the ID layout) and a
// pg_dump custom-format archive of the shard's schema, both read from one
// snapshot. A restore runs in one transaction on the target: it drops the
// schema it replaces, replays the archive, records the SQL versions,
// checks every table's count and checksum against the manifest (a
// mismatch rolls everything back), and carries every sequence past the
// dump's value, the replaced schema's value and, for id_seq, the newest
// restored ID, so next_id() never issues an ID at or below one the dump or
// the replaced schema held.
//
// The package depends on router (the catalog), migrations (the server's
// shardkit objects) and idgen; nothing in shardkit depends on it but
// shardctl.
package backup
