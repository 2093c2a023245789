package migrations

import (
	"io/fs"

	"github.com/shardkit/shardkit/internal/shardschema"
)

// Version is one per-shard migration version, read from an application's
// SQL files: Number (NNNN, at least 1; 0 is shardkit's own template), Name
// (the file name of the tables part, e.g. 0001_photos.sql), Tables (its
// SQL) and Indexes (the SQL of NNNN_name.indexes.sql, empty if absent).
type Version = shardschema.Version

// ReadVersions reads an application's per-shard SQL files from the root of
// fsys: NNNN_name.sql and optional NNNN_name.indexes.sql, written with
// unqualified table names. Files not ending in .sql are ignored; a .sql
// file with another name, two files of one version, an index file without
// its tables file, or version 0000 is refused with ErrBadMigrationFile, and
// so is a file system without any .sql file at its root (an embed.FS of a
// subdirectory needs fs.Sub). A nil fsys has no versions.
func ReadVersions(fsys fs.FS) ([]Version, error) { return shardschema.ReadVersions(fsys) }

// NoTransactionMarker is the line that marks a per-shard SQL file to run
// outside a transaction, one statement at a time: what CREATE INDEX
// CONCURRENTLY needs. Put it on a line of its own among the file's
// comments:
//
//	-- shardkit:no-transaction
//	CREATE INDEX CONCURRENTLY photos_created_at ON photos (created_at);
//
// Such a file is applied to each schema on one connection with that
// schema as its search_path, and recorded once every statement succeeded.
// A rerun after an interruption runs the file again, so its statements
// must be safe to repeat (IF NOT EXISTS), except CREATE INDEX
// CONCURRENTLY, which shardkit makes so: an index of that name already
// valid is skipped, and one left invalid by an interrupted build is
// dropped (DROP INDEX CONCURRENTLY) and built again. Each such index must
// be named.
const NoTransactionMarker = shardschema.NoTransactionMarker
