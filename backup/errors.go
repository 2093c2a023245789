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
	// shard's schema. Restore into an empty scratch database, or drop the
	// schema there first.
	ErrSchemaExists = errors.New("schema already exists on the scratch target")
	// ErrNoSchema reports a shard whose schema is missing on its home.
	// Check the shard map against the server (shardctl status); a
	// provisioning that did not finish is completed by running shardctl
	// init again.
	ErrNoSchema = errors.New("shard schema missing on its server")
	// ErrBadDump reports a file that is not a shardkit shard dump this
	// version can read. Check the path given (shardctl restore --in), or
	// take the dump again with shardctl dump.
	ErrBadDump = errors.New("not a readable shardkit shard dump")
	// ErrLayoutMismatch reports a dump made under another ID layout or
	// shard count than the catalog's. A dump restores only into a
	// deployment of the same layout and shard count (its IDs carry their
	// shard in their bits).
	ErrLayoutMismatch = errors.New("dump's ID layout differs from the catalog's")
	// ErrChecksumMismatch reports restored rows that differ from the ones
	// the dump recorded; the restore was rolled back. The target is as it
	// was: the file is damaged or not the dump it claims to be; restore
	// from another dump.
	ErrChecksumMismatch = errors.New("restored rows differ from the dump")
	// ErrNoTools reports that pg_dump, pg_restore or psql was not found.
	// Install the PostgreSQL client tools (Debian: postgresql-client), or
	// set SHARDKIT_PG_BIN to their directory.
	ErrNoTools = errors.New("PostgreSQL client tools not found")
)

// ToolError is a failed run of pg_dump, pg_restore or psql. Its message holds
// the tool's own; fix what it says (a connection, a privilege, a client older
// than the server) and run again.
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
