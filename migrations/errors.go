package migrations

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardkit/shardkit/internal/shardschema"
)

// Sentinel errors of provisioning. Each is wrapped with context (often in a
// *ServerError or *ShardError naming where it happened); test with errors.Is.
var (
	// ErrServerUnreachable reports a shard server that cannot be connected
	// to. Check that the server is up and its DSN; run again: provisioning
	// completes what is left.
	ErrServerUnreachable = shardschema.ErrServerUnreachable
	// ErrDuplicateServer reports a server name given twice, or a name the
	// catalog already holds with a different DSN. Name each server once;
	// to change a registered server's DSN, shardctl server set-dsn.
	ErrDuplicateServer = errors.New("duplicate server name")
	// ErrShardCountMismatch reports a shard count different from the
	// existing catalog's. Changing it would rekey every row. Leave the
	// count out (an existing catalog's is kept), or give the catalog's.
	ErrShardCountMismatch = errors.New("shard count differs from the catalog's")
	// ErrLayoutMismatch reports an ID layout different from the existing
	// catalog's (or from the one a shard server was provisioned with).
	// Leave the layout out (an existing catalog's is kept), or give the
	// catalog's.
	ErrLayoutMismatch = shardschema.ErrLayoutMismatch
	// ErrInsufficientPrivilege reports a server role that lacks a
	// privilege provisioning needs (SQLSTATE 42501); the message names the
	// privilege. Provision as a role that holds it (the servers' and the
	// catalog's owner, or a superuser).
	ErrInsufficientPrivilege = shardschema.ErrInsufficientPrivilege
	// ErrNoServers reports a Provision call without any server. Give at
	// least one server (shardctl init --server NAME=DSN).
	ErrNoServers = errors.New("no servers given")
	// ErrBadServerName reports a server name the catalog would refuse.
	// Start the name with a lower-case letter, then up to 62 of a-z, 0-9,
	// _ and -.
	ErrBadServerName = errors.New("invalid server name")
	// ErrBadMigrationFile reports a per-shard SQL file whose name or
	// content is unusable. Name each file NNNN_name.sql, one version per
	// file, with unqualified table names; the message says which file and
	// why.
	ErrBadMigrationFile = shardschema.ErrBadMigrationFile
	// ErrMigrationOrder reports a new migration version lower than one
	// already applied: it would run in a different order on new shards.
	// Give the new file a version above every applied one.
	ErrMigrationOrder = shardschema.ErrMigrationOrder
	// ErrMigrationChanged reports a per-shard migration file whose content
	// differs from the one already recorded in the catalog for that
	// version. A recorded file never changes: put it back as it was, and
	// make the change in a new file with the next version.
	ErrMigrationChanged = errors.New("applied migration file changed")
	// ErrMigrationFailed reports a Migrate whose new or fixed files failed
	// on a shard schema (the *ShardError it wraps names the shard, server
	// and file). Nothing was recorded in the catalog; the schemas that
	// applied the files before the failure keep them, so fix the file if it
	// failed everywhere, else fix what made it fail on that shard, and run
	// Migrate again.
	ErrMigrationFailed = errors.New("migration failed")
	// ErrMigrationIncomplete reports a version that a failed Migrate
	// applied to some shard schemas but that is not among the files given
	// now: put the file back as it was and run Migrate again to finish it.
	ErrMigrationIncomplete = errors.New("migration left unfinished")
	// ErrMovesInProgress reports shards that are moving or fenced, or
	// moves unfinished in the journal (a *MovesError), while a migration
	// would change their tables. Finish the moves first (shardctl move
	// --resume or --complete, shardctl rollback), then migrate.
	ErrMovesInProgress = errors.New("shard moves in progress")
)

// ServerError is an error on one shard server. It names the server; the error
// it wraps says what failed.
type ServerError struct {
	Server string // server name in the catalog
	Err    error
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("shardkit: server %q: %v", e.Server, e.Err)
}

// Unwrap returns the underlying error.
func (e *ServerError) Unwrap() error { return e.Err }

// MoveRef names an unfinished move.
type MoveRef struct {
	ID             int64
	Shard          int
	Source, Target string
	State          string // running, reversible or rolling_back
	Step           string // last step finished
}

// MovesError is a migration refused because moves are unfinished
// (ErrMovesInProgress): applied to one copy of a shard, a change breaks
// the replication between its copies (a new column the other side lacks
// stops the subscription), and a move's target is made from the per-shard
// SQL the run is changing.
type MovesError struct {
	Moves []MoveRef
}

func (e *MovesError) Error() string {
	parts := make([]string, len(e.Moves))
	for i, m := range e.Moves {
		parts[i] = fmt.Sprintf("move %d of shard %d (%s → %s) is %s at step %s", m.ID, m.Shard, m.Source, m.Target, m.State, m.Step)
	}
	return fmt.Sprintf("shardkit: %v: %s; a change applied to one copy of a shard would break the replication between its copies: "+
		"complete each move (shardctl move --shard N --complete) or roll it back (shardctl rollback --shard N), then run migrate",
		ErrMovesInProgress, strings.Join(parts, "; "))
}

// Unwrap returns ErrMovesInProgress.
func (e *MovesError) Unwrap() error { return ErrMovesInProgress }

// ShardError is an error applying a migration to one shard schema. It names
// the shard, the server and the file; the error it wraps says what failed.
// Its fields are Shard int, Server string (may be empty when not known),
// File string (the migration file, if the error came from one) and Err.
type ShardError = shardschema.ShardError

// classify turns driver errors on a server into typed errors (shardschema.Classify).
func classify(err error, need string) error { return shardschema.Classify(err, need) }
