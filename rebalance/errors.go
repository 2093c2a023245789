package rebalance

import (
	"errors"
	"fmt"
)

// Sentinel errors of package rebalance. Test with errors.Is.
var (
	// ErrMoveInProgress reports a shard that already has an unfinished move:
	// resume it (`shardctl move --resume`), complete it or roll it back.
	ErrMoveInProgress = errors.New("shard already has an unfinished move; resume, complete or roll it back")
	// ErrNoMove reports that there is no (unfinished) move to act on.
	ErrNoMove = errors.New("no unfinished move for this shard")
	// ErrSameServer reports a move whose target is the shard's current server.
	ErrSameServer = errors.New("shard is already on the target server")
	// ErrTargetNotActive reports a target server that is draining or
	// retired in the catalog: move shards onto active servers only.
	ErrTargetNotActive = errors.New("target server is not active; pick an active server")
	// ErrNotLogical reports a source or target whose wal_level is not
	// logical: use the offline mode (`--offline`) or set wal_level = logical.
	ErrNotLogical = errors.New("wal_level is not logical; use --offline or set wal_level = logical and restart")
	// ErrCutoverTimeout reports a cutover aborted because the target did not
	// apply the source's final LSN in time; the barrier was removed and the
	// shard unfenced. Resume to try again.
	ErrCutoverTimeout = errors.New("cutover timed out waiting for the target to apply the final LSN; barrier removed, shard unfenced; resume to retry")
	// ErrWrongState reports an action the move's state does not allow (for
	// example --complete on a move that has not cut over).
	ErrWrongState = errors.New("move is not in a state that allows this")
	// ErrMismatch reports a verification that found the two copies differ.
	ErrMismatch = errors.New("copies differ")
	// ErrUnsafeName reports a generated identifier that failed validation.
	ErrUnsafeName = errors.New("unsafe replication object name")
)

// MismatchError names the table whose copies differ.
type MismatchError struct {
	Schema, Table          string
	SourceRows, TargetRows int64
	SourceSum, TargetSum   string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("shardkit: verify %s.%s: %v: source %d rows (checksum %s), target %d rows (checksum %s); "+
		"do not complete the move; roll it back or resume it", e.Schema, e.Table, ErrMismatch,
		e.SourceRows, e.SourceSum, e.TargetRows, e.TargetSum)
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// MoveError is a move that stopped at a step; the journal holds the same
// error. Resume or roll back the move.
type MoveError struct {
	ID    int64
	Shard int
	Step  Step
	Err   error
}

func (e *MoveError) Error() string {
	return fmt.Sprintf("shardkit: move %d of shard %d stopped at step %s: %v (fix the cause, then `shardctl move --resume --shard %d` or `shardctl rollback --shard %d`)",
		e.ID, e.Shard, e.Step, e.Err, e.Shard, e.Shard)
}

// Unwrap returns the cause.
func (e *MoveError) Unwrap() error { return e.Err }
