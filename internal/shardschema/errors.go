package shardschema

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// The sentinels of the per-schema machinery. Package migrations exports
// each under the same name (migrations.ErrLayoutMismatch is
// ErrLayoutMismatch), with the doc comment users read: what it reports and
// what to do.
var (
	ErrServerUnreachable     = errors.New("server unreachable")
	ErrLayoutMismatch        = errors.New("ID layout differs from the catalog's")
	ErrInsufficientPrivilege = errors.New("insufficient privilege")
	ErrBadMigrationFile      = errors.New("bad per-shard migration file")
	ErrMigrationOrder        = errors.New("migration added out of order")
)

// ShardError is an error applying a migration to one shard schema. It names
// the shard, the server and the file; the error it wraps says what failed.
// Package migrations exports it as migrations.ShardError.
type ShardError struct {
	Shard  int
	Server string // may be empty when not known
	File   string // migration file, if the error came from one
	Err    error
}

func (e *ShardError) Error() string {
	where := fmt.Sprintf("shard %d", e.Shard)
	if e.Server != "" {
		where += fmt.Sprintf(" on server %q", e.Server)
	}
	if e.File != "" {
		where += fmt.Sprintf(", file %s", e.File)
	}
	return fmt.Sprintf("shardkit: %s: %v", where, e.Err)
}

// Unwrap returns the underlying error.
func (e *ShardError) Unwrap() error { return e.Err }

// Classify turns driver errors on a server into typed errors: connection
// failures become ErrServerUnreachable and SQLSTATE 42501 becomes
// ErrInsufficientPrivilege naming what is needed (need; "" names the
// ownership of the shardkit and shard_NNNN schemas). Other errors pass
// through.
func Classify(err error, need string) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		if need == "" {
			need = "ownership of the shardkit and shard_NNNN schemas"
		}
		return fmt.Errorf("%w: the DSN's role needs %s (server said: %s)", ErrInsufficientPrivilege, need, pe.Message)
	}
	if errors.Is(err, router.ErrNotPrimary) {
		// The host is not the server's recorded primary (an old primary
		// back after a failover): the error says what to do.
		return fmt.Errorf("%w: nothing was run on it", err)
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %v; check the DSN and that the server is running", ErrServerUnreachable, err)
	}
	return err
}

// IsLockTimeout reports a statement cancelled by lock_timeout (55P03) or
// chosen as a deadlock victim (40P01): both leave nothing done and are
// worth a retry.
func IsLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01")
}
