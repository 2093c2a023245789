package backup

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of dump and restore. Test with errors.Is.
var (
	// ErrNotConfirmed reports a restore into the shard's home without
	// RestoreOptions.Replace (shardctl restore --yes): it replaces the
	// schema and drops every row written since the dump.
	ErrNotConfirmed = errors.New("restore into the shard's home not confirmed")
	// ErrShardBusy reports a shard that is moving or fenced: finish or roll
	// back its move first.
	ErrShardBusy = errors.New("shard is moving or fenced")
	// ErrSchemaExists reports a scratch target that already holds the
	// shard's schema.
	ErrSchemaExists = errors.New("schema already exists on the scratch target")
	// ErrNoSchema reports a shard whose schema is missing on its home.
	ErrNoSchema = errors.New("shard schema missing on its server")
	// ErrBadDump reports a file that is not a shardkit shard dump this
	// version can read.
	ErrBadDump = errors.New("not a readable shardkit shard dump")
	// ErrLayoutMismatch reports a dump made under another ID layout or
	// shard count than the catalog's.
	ErrLayoutMismatch = errors.New("dump's ID layout differs from the catalog's")
	// ErrChecksumMismatch reports restored rows that differ from the ones
	// the dump recorded; the restore was rolled back.
	ErrChecksumMismatch = errors.New("restored rows differ from the dump")
	// ErrNoTools reports that pg_dump, pg_restore or psql was not found.
	ErrNoTools = errors.New("PostgreSQL client tools not found")
)

// ToolError is a failed run of pg_dump, pg_restore or psql.
type ToolError struct {
	Tool   string // "pg_dump", "pg_restore", "psql"
	Stderr string // the tool's last lines of output
	Err    error
}

func (e *ToolError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		return fmt.Sprintf("%s: %v", e.Tool, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Tool, e.Err, msg)
}

// Unwrap returns the underlying error.
func (e *ToolError) Unwrap() error { return e.Err }
