// Package migrations provisions shardkit's shard servers and evolves the
// tables of every logical shard.
//
// # Per-shard SQL
//
// An application keeps its per-shard tables as versioned SQL files,
// NNNN_name.sql (and optionally NNNN_name.indexes.sql for secondary
// indexes), written with unqualified names:
//
//	-- 0001_photos.sql
//	CREATE TABLE photos (
//	    id      bigint PRIMARY KEY DEFAULT next_id(),
//	    user_id bigint NOT NULL
//	);
//
// shardkit applies each file to each shard schema (shard_0000 …) in a
// transaction (unless the file is marked NoTransactionMarker) with SET
// LOCAL search_path TO that schema only, so no
// identifier is templated into application SQL, and records it on the
// server in shardkit.shard_migrations (schema, version, part, and the
// SHA-256 of what it ran): every run is idempotent and an interrupted one
// resumes. [Migrate] records the files in the catalog (shardkit.shard_sql)
// only once every schema applied them: a file that fails on a schema
// records nothing ([ErrMigrationFailed]), so the catalog never holds a
// version that applies nowhere. A file that changed after some schema
// applied it is refused ([ErrMigrationChanged]) — also when a failed run
// applied it to some schemas only; such a file must come back unchanged
// ([ErrMigrationIncomplete]) and finish. One that failed everywhere may be
// fixed in place or dropped. The shard mover creates a shard's schema on
// its target from the recorded files. Versions are applied in order; a
// new version numbered below one already applied is refused
// ([ErrMigrationOrder]). Functions in application SQL should use BEGIN ATOMIC
// bodies or their own SET search_path, since callers' search_paths differ.
//
// # Provisioning and migrating
//
// [Provision] installs shardkit's objects on each server, registers the
// servers in the catalog, and creates every shard schema; [Migrate] applies new
// per-shard SQL files; [Status] reports what each server holds:
//
//	cat, _ := catalog.Open(ctx, catalogDSN)
//	err := migrations.Provision(ctx, cat, migrations.ProvisionOptions{
//		Servers: []migrations.ServerSpec{{Name: "a", DSN: dsnA}, {Name: "b", DSN: dsnB}},
//		ShardSQL: os.DirFS("db/shard"), // 2000 shards, default layout
//	})
//	// later, new files in db/shard:
//	err = migrations.Migrate(ctx, cat, os.DirFS("db/shard"), migrations.MigrateOptions{})
//	report, _ := migrations.Status(ctx, cat)
//
// # Migrating online
//
// [MigrateWithSummary] (and [Migrate]) gives each schema a transaction of
// its own with a lock_timeout (MigrateOptions.LockTimeout, 500 ms by
// default), so that no request waits long behind an ALTER and no schema's
// locks are held while another's are awaited. A schema whose lock times
// out is retried after the others, with backoff and jitter; each timeout
// is reported (Progress.Wait) with the sessions holding the lock; a schema
// that waited MaxLockWait is given up with a [*LockWaitError] naming them,
// the others finished. A file carrying [NoTransactionMarker] runs outside
// a transaction, statement by statement, for CREATE INDEX CONCURRENTLY.
// Migrate refuses while a move is unfinished ([*MovesError]); while it
// runs, no move can be journalled.
//
//	sum, err := migrations.MigrateWithSummary(ctx, cat, os.DirFS("db/shard"), migrations.MigrateOptions{
//		WorkersPerServer: 2,
//		Progress: func(p migrations.Progress) {
//			if p.Wait != nil {
//				log.Printf("%s waits for %v", p.Wait.Schema, p.Wait.Blockers)
//			}
//		},
//	})
//
// # Objects on each shard server
//
// Schema shardkit (created once per server by [Provision] or [Migrate],
// versioned in shardkit.server_migrations) holds server_layout (the catalog's ID layout,
// checked on every run: [ErrLayoutMismatch]), shard_migrations, and
// shardkit.next_id(shard int, seq regclass), the in-database ID generator.
// Each shard schema holds the sequence id_seq and a wrapper next_id() that
// calls shardkit.next_id with the shard's number and sequence.
//
// next_id() issues IDs in the catalog's layout with slot 0 (application
// processes lease slots 1..2^SlotBits-1, or parts of them, so the two never
// collide). The
// sequence holds a hybrid value h = ms_since_epoch<<counterBits | counter;
// under a per-shard session advisory lock (released on any error, cancels
// included) the generator takes nextval and, if h has fallen behind the
// clock, moves it up to the clock with setval. The ID is then
// (h>>counterBits)<<(shardBits+seqBits) | shard<<seqBits | (h&counterMask)<<slotBits.
// A burst of rows in one millisecond (INSERT … SELECT of 10,000 rows) runs
// ahead of the clock rather than colliding, and the sequence never goes
// backwards, so clock regressions are safe.
//
// Application roles that are not the owner need USAGE on schema shardkit
// and on the shard schemas, and USAGE and UPDATE on each id_seq (next_id()
// calls nextval and setval), besides their table privileges.
//
// Provisioning is batched (25 schemas per transaction) with one worker per
// server; its figures are on docs/performance.md in the repository.
// [Status] reads estimated rows (pg_class.reltuples / n_live_tup) and
// pg_total_relation_size, never count(*).
//
// # For the shard mover
//
// The operations that only shardkit's own packages use (create one shard's
// schema on a server with its indexes deferred, add them later, drop it)
// live in internal/shardschema; this package implements them. The value a
// move carries from source to target is id_seq's last_value, which is h,
// not an ID: setval(target, source_last_value + margin, true) keeps target
// IDs above every source ID.
package migrations
