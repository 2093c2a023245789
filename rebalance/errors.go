package rebalance

import (
	"errors"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/internal/bytesize"
)

// Sentinel errors of package rebalance. Test with errors.Is.
var (
	// ErrMoveInProgress reports a shard that already has an unfinished move:
	// resume it (Mover.Resume), complete it or roll it back.
	ErrMoveInProgress = errors.New("shard already has an unfinished move; Mover.Resume, Mover.Complete or Mover.Rollback it")
	// ErrNoMove reports that there is no (unfinished) move to act on.
	ErrNoMove = errors.New("no unfinished move for this shard")
	// ErrSameServer reports a move whose target is the shard's current server.
	ErrSameServer = errors.New("shard is already on the target server")
	// ErrTargetNotActive reports a target server that is draining or
	// retired in the catalog: move shards onto active servers only.
	ErrTargetNotActive = errors.New("target server is not active; pick an active server")
	// ErrNotLogical reports a source or target whose wal_level is not
	// logical: use the offline mode (MoveOptions.Offline) or set wal_level = logical.
	ErrNotLogical = errors.New("wal_level is not logical; move offline (MoveOptions.Offline) or set wal_level = logical and restart the server")
	// ErrCutoverTimeout reports a cutover aborted because the target did not
	// apply the source's final LSN in time; the barrier was removed and the
	// shard unfenced. Resume to try again.
	ErrCutoverTimeout = errors.New("cutover timed out waiting for the target to apply the final LSN; barrier removed, shard unfenced; resume to retry")
	// ErrFenceLapsed reports a cutover whose fence lease (Config.FenceLease,
	// counted on the serving side's clock) lapsed, or was released by the
	// fence watcher, before the cutover sealed its write barrier: the map
	// was not flipped, writes go to the old home again and the move is
	// resumable. Retry with Mover.Resume, or raise Config.FenceLease.
	ErrFenceLapsed = errors.New("fence lease lapsed before the cutover sealed the write barrier; map not flipped, shard writable on its old home; the move is resumable: Mover.Resume (or raise Config.FenceLease)")
	// ErrLagGate reports a cutover that did not start because the replica
	// never confirmed the serving side's position within
	// Config.CutoverLag before Config.GateTimeout; nothing was fenced.
	// Retry with Mover.Resume when the servers are less busy, or raise
	// Config.CutoverLag (a longer fenced window).
	ErrLagGate = errors.New("replica did not keep up closely enough to start the cutover; nothing fenced; retry with Mover.Resume or raise Config.CutoverLag")
	// ErrCatchUp reports a move stopped before the fence because its shard
	// is written faster than the target applies and the lag would not
	// drain within Config.DrainBound: nothing fenced, the move resumable.
	// The *CatchUpError carries the rates.
	ErrCatchUp = errors.New("target applies more slowly than the shard is written; nothing fenced; throttle the shard's writers, move at a quieter time, or raise Config.DrainBound, then Mover.Resume")
	// ErrStepTimeout reports a step (or Verify, or Complete) that did not
	// finish within Config.StepTimeout; the *TimeoutError says what it
	// waited for. Fix the cause and retry (Mover.Resume, Mover.Complete).
	ErrStepTimeout = errors.New("step did not finish in time")
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
	return fmt.Sprintf("shardkit: move %d of shard %d stopped at step %s: %v (fix the cause, then Mover.Resume or Mover.Rollback of shard %d)",
		e.ID, e.Shard, e.Step, e.Err, e.Shard)
}

// Unwrap returns the cause.
func (e *MoveError) Unwrap() error { return e.Err }

// TimeoutError is a step, Verify or Complete that ran past its deadline;
// Err says what it was waiting for.
type TimeoutError struct {
	What  string
	After time.Duration
	Err   error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("shardkit: %s: %v after %v: %v", e.What, ErrStepTimeout, e.After, e.Err)
}

// Unwrap returns ErrStepTimeout and the cause.
func (e *TimeoutError) Unwrap() []error { return []error{ErrStepTimeout, e.Err} }

// LagGateError is a cutover whose lag gate did not open: the fastest
// confirmation seen, against the bound.
type LagGateError struct {
	Best, Bound time.Duration
	Tries       int
}

func (e *LagGateError) Error() string {
	return fmt.Sprintf("%v (fastest confirmation %v over %d tries, bound Config.CutoverLag %v)", ErrLagGate, e.Best, e.Tries, e.Bound)
}

// Unwrap returns ErrLagGate.
func (e *LagGateError) Unwrap() error { return ErrLagGate }

// CatchUpError is a move that stopped waiting for its target to catch up
// with a shard written faster than the target applies: the rates measured
// last (bytes per second of the source's WAL), the lag, the time the lag
// would take to drain once fenced (-1: nothing applied), against
// Config.DrainBound, after Waited of Config.CatchUpTimeout.
type CatchUpError struct {
	WriteRate, ApplyRate float64
	Lag                  int64
	Drain, Bound, Waited time.Duration
}

func (e *CatchUpError) Error() string {
	drain := "never (nothing applied)"
	if e.Drain >= 0 {
		drain = e.Drain.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%v (after %v: source written at %s/s, target applying %s/s, lag %s would drain in %s, bound Config.DrainBound %v)",
		ErrCatchUp, e.Waited.Round(time.Millisecond), bytesize.Format(e.WriteRate), bytesize.Format(e.ApplyRate), bytesize.Format(float64(e.Lag)), drain, e.Bound)
}

// Unwrap returns ErrCatchUp.
func (e *CatchUpError) Unwrap() error { return ErrCatchUp }
