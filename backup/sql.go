package backup

import (
	_ "embed"
	"strings"

	"github.com/shardkit/shardkit/internal/rowsum"
)

// Statements of Dump, on the shard's home, in one repeatable-read snapshot.
const (
	sqlExportSnapshot = `SELECT pg_export_snapshot(), clock_timestamp()`
	sqlSchemaExists   = `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`
	sqlVersions       = `SELECT version, part, name, applied_at FROM shardkit.shard_migrations WHERE schema_name = $1 ORDER BY version, part`
	// Sequences are not transactional: this reads their current values,
	// which are at or past every value the snapshot's rows used.
	sqlSequences = `SELECT c.relname, coalesce(pg_sequence_last_value(c.oid), 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'S' ORDER BY c.relname`
	sqlTables = `SELECT c.relname,
    EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped AND a.atttypid = 'int8'::regtype)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`
	// sqlNewestID is formatted with the quoted schema and table.
	sqlNewestID = `SELECT coalesce(max(id), 0) FROM %s`
)

// The restore script around pg_restore's output, run by psql in one
// transaction. Values reach it as psql variables, which psql quotes itself
// (:'name' as a literal, :"name" as an identifier).
var (
	//go:embed sql/restore_begin.sql
	restoreBegin string
	//go:embed sql/restore_end.sql
	restoreEndSQL string
	// restoreEnd checks the restored rows with the sum the dump recorded:
	// rowsum's settings and statement take the places the script marks.
	restoreEnd = strings.NewReplacer(
		"/*rowsum.Settings*/", rowsum.Settings+";",
		"/*rowsum.Format(s, t.name)*/", rowsum.Format("s", "t.name"),
	).Replace(restoreEndSQL)
)

// checksumSQLState is raised by the restore script when a restored table
// does not match the manifest.
const checksumSQLState = "SK002"
