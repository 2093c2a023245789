package rebalance

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardkit/shardkit/internal/bytesize"
)

// Kinds of failure: a caller branches on these with errors.Is, and every
// *MoveError has one as its Kind. Each says what to do next.
var (
	// ErrMoveInProgress: the shard already has an unfinished move; resume
	// it (Mover.Resume), complete it or roll it back.
	ErrMoveInProgress = errors.New("shard already has an unfinished move; Mover.Resume, Mover.Complete or Mover.Rollback it")
	// ErrWrongState: there is no unfinished move of the shard, or its
	// state does not allow the action (for example Complete of a move that
	// has not cut over). shardctl status shows each shard's unfinished
	// move and its step.
	ErrWrongState = errors.New("move is not in a state that allows this")
	// ErrSameServer: the shard is on the target server already. Nothing to
	// do; pick another target.
	ErrSameServer = errors.New("shard is already on the target server")
	// ErrPreflight: the move was refused before any change, by its
	// preflight checks (or an inactive target); a *MoveError holds every
	// failed check as its Err, and errors.Is finds ErrNotLogical,
	// ErrMoveInProgress and catalog.ErrProvisionRunning among them.
	ErrPreflight = errors.New("move refused by its preflight checks; nothing was changed")
	// ErrNotLogical: a source or target whose wal_level is not logical.
	// Move offline (MoveOptions.Offline) or set wal_level = logical.
	ErrNotLogical = errors.New("wal_level is not logical; move offline (MoveOptions.Offline) or set wal_level = logical and restart the server")
	// ErrPreparedTransactions: prepared transactions hold writes to the
	// shard on its serving server; finish them (resolver.Resolver), then
	// resume the move.
	ErrPreparedTransactions = errors.New("prepared transactions hold writes to the shard on its serving server: finish them (resolver.Resolver, or COMMIT/ROLLBACK PREPARED), then resume the move")
	// ErrCutoverAborted: the move stopped short of its cutover, or its
	// cutover was undone, with nothing lost and the shard writable on its
	// old home: the target could not keep up (Config.DrainBound,
	// Config.CutoverLag), did not apply the final LSN in time
	// (Config.CutoverTimeout), or the fence lease lapsed
	// (Config.FenceLease). The move is resumable: Mover.Resume later, or
	// with the bound the message names raised.
	ErrCutoverAborted = errors.New("cutover aborted; nothing lost, shard writable on its old home; the move is resumable: Mover.Resume")
	// ErrReverseLost: the move can no longer be rolled back: its reverse
	// replication slot is gone from the target, as after a failover of
	// the target to a standby that did not sync it (PostgreSQL 15 and 16,
	// or 17+ without sync_replication_slots). Nothing was changed and
	// the move stays reversible: Mover.Complete it (the target has every
	// write), then move the shard back with a new move if it must go back.
	ErrReverseLost = errors.New("the move's reverse replication is lost; it can only be completed: Mover.Complete, then move the shard back with a new move")
	// ErrMismatch: verification found that the two copies differ. Do not
	// complete the move; roll it back or resume it.
	ErrMismatch = errors.New("copies differ")
	// ErrStopped: a step failed (or ran past Config.StepTimeout); the
	// journal holds the error. Fix the cause, then Mover.Resume or
	// Mover.Rollback.
	ErrStopped = errors.New("move stopped at a step")
	// ErrStatementLogging: the admin role may not turn statement logging
	// off for the statement that carries a password (CREATE SUBSCRIPTION's
	// connection string); the move stops rather than log it. Make the
	// admin role a superuser, or GRANT SET ON PARAMETER log_statement,
	// log_min_error_statement, log_min_duration_statement TO it, then
	// resume the move.
	ErrStatementLogging = errors.New("the admin role cannot keep CREATE SUBSCRIPTION out of the server log: " +
		"make it a superuser, or GRANT SET ON PARAMETER log_statement, log_min_error_statement, log_min_duration_statement TO it")
)

// kinds are the kinds of failure, the more specific first: kindOf returns the first
// one err matches.
var kinds = []error{ErrMoveInProgress, ErrSameServer, ErrNotLogical, ErrStatementLogging, ErrPreparedTransactions,
	ErrCutoverAborted, ErrReverseLost, ErrMismatch, ErrWrongState, ErrPreflight, ErrStopped}

// kinded is a cause of failure of a given Kind: errors.Is(err, its kind)
// holds, and the message is the cause's alone.
type kinded struct {
	kind error // one of kinds
	err  error
}

func (e *kinded) Error() string   { return e.err.Error() }
func (e *kinded) Unwrap() []error { return []error{e.kind, e.err} }

func ofKind(k, err error) error { return &kinded{kind: k, err: err} }

// Causes: what went wrong, each of the kind its caller acts on.
var (
	errTargetNotActive = ofKind(ErrPreflight, errors.New("target server is not active; pick an active server"))
	errCutoverTimeout  = ofKind(ErrCutoverAborted, errors.New("cutover timed out waiting for the target to apply the final LSN; barrier removed, shard unfenced; resume to retry"))
	errFenceLapsed     = ofKind(ErrCutoverAborted, errors.New("fence lease lapsed before the cutover sealed the write barrier; map not flipped, shard writable on its old home; the move is resumable: Mover.Resume (or raise Config.FenceLease)"))
	errLagGate         = ofKind(ErrCutoverAborted, errors.New("replica did not keep up closely enough to start the cutover; nothing fenced; retry with Mover.Resume or raise Config.CutoverLag"))
	errCatchUp         = ofKind(ErrCutoverAborted, errors.New("target applies more slowly than the shard is written; nothing fenced; throttle the shard's writers, move at a quieter time, or raise Config.DrainBound, then Mover.Resume"))
	errStepTimeout     = ofKind(ErrStopped, errors.New("step did not finish in time"))
	errUnsafeName      = ofKind(ErrStopped, errors.New("unsafe replication object name"))
	errNoMove          = ofKind(ErrWrongState, errors.New("no unfinished move for this shard"))
)

// kindOf returns the kind of err (one of kinds), or nil when it has none.
func kindOf(err error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// MoveError is a failure of a move, of its preflight, or of Verify,
// Complete or Rollback, that has a Kind: every such error the Mover
// returns is one. Err is the cause, whose message says what happened.
type MoveError struct {
	Kind           error // ErrPreflight, ErrCutoverAborted, ErrStopped, … (errors.Is matches it)
	Shard          int
	Source, Target string // the move's servers, "" when not known
	ID             int64  // the move's journal ID, 0 before it was journalled
	Step           Step   // the step it stopped at, "" when none
	Err            error
}

func (e *MoveError) Error() string {
	switch f := e.failed(); {
	case f != nil:
		return fmt.Sprintf("shardkit: move of shard %d from %s to %s: %v (%d failed): %v",
			e.Shard, e.Source, e.Target, ErrPreflight, len(f), f)
	case e.ID != 0 && e.Step != "":
		return fmt.Sprintf("shardkit: move %d of shard %d stopped at step %s: %v (fix the cause, then Mover.Resume or Mover.Rollback of shard %d)",
			e.ID, e.Shard, e.Step, e.Err, e.Shard)
	case e.Err == nil:
		return fmt.Sprintf("shardkit: shard %d: %v", e.Shard, e.Kind)
	}
	return e.Err.Error()
}

// Unwrap returns the Kind and the cause.
func (e *MoveError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// asMoveError makes *err, when it has a Kind and is not one yet, a
// *MoveError of shard: what the exported methods of Mover return.
func asMoveError(err *error, shard int) { asMoveErrorTo(err, shard, "") }

// asMoveErrorTo is asMoveError for a move to target.
func asMoveErrorTo(err *error, shard int, target string) {
	if *err == nil {
		return
	}
	var me *MoveError
	if errors.As(*err, &me) {
		return
	}
	if k := kindOf(*err); k != nil {
		*err = &MoveError{Kind: k, Shard: shard, Target: target, Err: *err}
	}
}

// mismatchError names the table whose copies differ.
type mismatchError struct {
	Schema, Table          string
	SourceRows, TargetRows int64
	SourceSum, TargetSum   string
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("shardkit: verify %s.%s: %v: source %d rows (checksum %s), target %d rows (checksum %s); "+
		"do not complete the move; roll it back or resume it", e.Schema, e.Table, ErrMismatch,
		e.SourceRows, e.SourceSum, e.TargetRows, e.TargetSum)
}

func (e *mismatchError) Unwrap() error { return ErrMismatch }

// timeoutError is a step, Verify or Complete that ran past its deadline;
// Err says what it was waiting for.
type timeoutError struct {
	What  string
	After time.Duration
	Err   error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("shardkit: %s: %v after %v: %v", e.What, errStepTimeout, e.After, e.Err)
}

func (e *timeoutError) Unwrap() []error { return []error{errStepTimeout, e.Err} }

// lagGateError is a cutover whose lag gate did not open: the fastest
// confirmation seen, against the bound.
type lagGateError struct {
	Best, Bound time.Duration
	Tries       int
}

func (e *lagGateError) Error() string {
	return fmt.Sprintf("%v (fastest confirmation %v over %d tries, bound Config.CutoverLag %v)", errLagGate, e.Best, e.Tries, e.Bound)
}

func (e *lagGateError) Unwrap() error { return errLagGate }

// catchUpError is a move that stopped waiting for its target to catch up
// with a shard written faster than the target applies: the rates measured
// last (bytes per second of the source's WAL), the lag, the time the lag
// would take to drain once fenced (-1: nothing applied), against
// Config.DrainBound, after Waited of Config.CatchUpTimeout.
type catchUpError struct {
	WriteRate, ApplyRate float64
	Lag                  int64
	Drain, Bound, Waited time.Duration
}

func (e *catchUpError) Error() string {
	drain := "never (nothing applied)"
	if e.Drain >= 0 {
		drain = e.Drain.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%v (after %v: source written at %s/s, target applying %s/s, lag %s would drain in %s, bound Config.DrainBound %v)",
		errCatchUp, e.Waited.Round(time.Millisecond), bytesize.Format(e.WriteRate), bytesize.Format(e.ApplyRate), bytesize.Format(float64(e.Lag)), drain, e.Bound)
}

func (e *catchUpError) Unwrap() error { return errCatchUp }

// failedChecks are the failed checks of a refused move, each a *checkError.
type failedChecks []error

func (f failedChecks) Error() string {
	parts := make([]string, len(f))
	for i, e := range f {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (f failedChecks) Unwrap() []error { return f }

// failed returns the failed checks of a refusal by preflight.
func (e *MoveError) failed() failedChecks {
	f, _ := e.Err.(failedChecks)
	return f
}
