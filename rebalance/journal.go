package rebalance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/catalogmove"
)

// Step is a step of a move, by the name the journal records it under
// ("created", "copied_snapshot", "fenced", "flipped", "rb_fenced", …; the
// whole list is in docs/moves.md). Which steps a move runs, and in which
// order, is data of this package (an online move, an offline one, a
// rollback), not a promise of its API: compare a Step only with names the
// journal has shown.
type Step string

// The steps by name. The journal's step column holds the last one
// finished; a mover resumes with the one after it in its mode's order
// (onlineSteps, offlineSteps, rollbackSteps) — not the order of these
// declarations: an online move makes its reverse slot before it fences.
const (
	stepCreated        Step = "created"         // journal row written
	stepMapMoving      Step = "map_moving"      // shard map state moving
	stepTargetSchema   Step = "target_schema"   // schema and tables on the target
	stepPublication    Step = "publication"     // publication on the source
	stepCopiedSnapshot Step = "copied_snapshot" // slot on the source, every table copied as of the snapshot it exported
	stepIndexes        Step = "indexes"         // keys, indexes, foreign keys and triggers built on the target
	stepSubscribed     Step = "subscribed"      // subscription on the target, streaming from the slot
	stepCaughtUp       Step = "caught_up"       // target close behind the source
	stepFenced         Step = "fenced"          // shard map state fenced
	stepBarrier        Step = "barrier"         // source refuses writes; final LSN captured
	stepApplied        Step = "applied"         // target applied the final LSN
	stepReverseSlot    Step = "reverse_slot"    // publication and slot on the target for rollback
	stepSequences      Step = "sequences"       // sequences carried, target clock past the newest ID
	stepSealed         Step = "sealed"          // source barrier sealed before its fence lease lapsed
	stepFlipped        Step = "flipped"         // shard map points at the target, active
	stepReverse        Step = "reverse"         // forward replication gone, reverse replication running
	stepCleaned        Step = "cleaned"         // replication and the old copy removed
	stepCopiedOff      Step = "copied_offline"  // offline mode: rows copied with COPY
	stepVerified       Step = "verified"        // offline mode: both sides verified equal
)

// stepCopying is not journalled: the copy calls Config.hook with it once
// its first table is in, so that tests can kill a mover in mid-copy.
const stepCopying Step = "copying"

// onlineSteps is the order of an online move up to the point where it is
// reversible.
var onlineSteps = []Step{
	stepCreated, stepMapMoving, stepTargetSchema, stepPublication, stepCopiedSnapshot,
	stepIndexes, stepSubscribed, stepCaughtUp, stepReverseSlot, stepFenced, stepBarrier, stepApplied,
	stepSequences, stepSealed, stepFlipped, stepReverse,
}

// offlineSteps is the order of an offline move.
var offlineSteps = []Step{
	stepCreated, stepMapMoving, stepTargetSchema, stepFenced, stepBarrier,
	stepCopiedOff, stepIndexes, stepVerified, stepSequences, stepFlipped,
}

// stepIndex returns the position of s in steps, or -1.
func stepIndex(steps []Step, s Step) int {
	for i, x := range steps {
		if x == s {
			return i
		}
	}
	return -1
}

// State is the state of a move.
type State string

// Move states.
const (
	StateRunning     State = "running"      // going forward (or stopped part way: resume or roll back)
	StateReversible  State = "reversible"   // cut over; reverse replication kept for rollback
	StateRollingBack State = "rolling_back" // a rollback is under way (resume it with rollback)
	StateCompleted   State = "completed"    // cleaned up; nothing left on the old server
	StateRolledBack  State = "rolled_back"  // the shard is back on its source; nothing left on the target
)

// How a move copies data, as the journal records it: online by logical
// replication with a short fence at cutover, offline by COPY under a fence
// for the whole copy (wal_level is not logical).
const (
	modeOnline  = "online"
	modeOffline = "offline"
)

func modeName(offline bool) string {
	if offline {
		return modeOffline
	}
	return modeOnline
}

// Move is one row of the move journal.
type Move struct {
	ID        int64
	Shard     int
	Source    string
	Target    string
	Offline   bool // copied by COPY under a fence (MoveOptions.Offline), not by logical replication
	State     State
	Step      Step   // last step finished
	Doing     Step   // step under way, "" when none
	Error     string // last error, "" when the last step succeeded
	FinalLSN  string // serving side's WAL position captured with the barrier, "" until then
	TargetLSN string // target's WAL position after it applied FinalLSN, "" until then
	SeqValue  int64
	FencedFor time.Duration // fenced window at cutover (0 until cut over)
	Cutover   CutoverTimes  // where the last cutover's time went (zero until cut over)
	Started   time.Time
	Updated   time.Time
	Finished  *time.Time
	// Tag is random, made by the catalog when the move is journalled; the
	// move's replication objects are named after its shard, ID and tag, so
	// that moves of two catalogs whose servers share a cluster never
	// collide. "" for moves journalled before the tag existed.
	Tag string
}

// open reports whether the move is unfinished (running, reversible or rolling back).
func (m Move) open() bool {
	return m.State == StateRunning || m.State == StateReversible || m.State == StateRollingBack
}

// moveOf gives a journal row its types.
func moveOf(r catalogmove.MoveRow) (Move, error) {
	m := Move{ID: r.ID, Shard: r.Shard, Source: r.Source, Target: r.Target, Offline: r.Mode == modeOffline, State: State(r.State),
		Step: Step(r.Step), Doing: Step(r.Doing), Error: r.Error, FinalLSN: r.FinalLSN, TargetLSN: r.TargetLSN,
		SeqValue: r.SeqValue, FencedFor: fromMs(r.FencedMs), Started: r.Started, Updated: r.Updated, Finished: r.Finished, Tag: r.Tag}
	if len(r.Cutover) > 0 {
		if err := json.Unmarshal(r.Cutover, &m.Cutover); err != nil {
			return Move{}, fmt.Errorf("shardkit: journal: move %d: cutover times %q: %w", m.ID, r.Cutover, err)
		}
	}
	return m, nil
}

// journal reads and writes the move journal, through the catalog.
type journal struct{ s *catalogmove.Store }

func (j journal) create(ctx context.Context, shard int, source, target string, offline bool) (Move, error) {
	r, err := j.s.CreateMove(ctx, shard, source, target, modeName(offline))
	if errors.Is(err, catalogmove.ErrMoveOpen) {
		return Move{}, fmt.Errorf("shardkit: shard %d: %w", shard, ErrMoveInProgress)
	}
	if err != nil {
		return Move{}, err
	}
	return moveOf(r)
}

// open returns the unfinished move of a shard, or errNoMove.
func (j journal) open(ctx context.Context, shard int) (Move, error) {
	r, err := j.s.OpenMove(ctx, shard)
	if errors.Is(err, catalogmove.ErrNoOpenMove) {
		return Move{}, fmt.Errorf("shardkit: shard %d: %w", shard, errNoMove)
	}
	if err != nil {
		return Move{}, err
	}
	return moveOf(r)
}

// beginStep records s as under way.
func (j journal) beginStep(ctx context.Context, id int64, s Step) error {
	return j.s.BeginStep(ctx, id, string(s))
}

// endStep records s as the last step finished, none under way.
func (j journal) endStep(ctx context.Context, id int64, s Step) error {
	return j.s.EndStep(ctx, id, string(s))
}

// finishStep records s finished, next under way, and the values m holds
// (LSNs, sequence value, fenced time), in one round trip.
func (j journal) finishStep(ctx context.Context, m *Move, s, next Step) error {
	return j.s.FinishStep(ctx, m.ID, catalogmove.StepDone{Step: string(s), Next: string(next),
		FinalLSN: m.FinalLSN, TargetLSN: m.TargetLSN, SeqValue: m.SeqValue, FencedMs: millis(m.FencedFor)})
}

// failStep records msg as the error of the step under way.
func (j journal) failStep(ctx context.Context, id int64, msg string) error {
	return j.s.FailStep(ctx, id, msg)
}

// recordCutover records the fenced window, its breakdown and (when not
// "") the target's LSN, once the window has closed.
func (j journal) recordCutover(ctx context.Context, id int64, fenced time.Duration, ct CutoverTimes, targetLSN string) error {
	b, err := json.Marshal(ct)
	if err != nil {
		return err
	}
	return j.s.RecordCutover(ctx, id, millis(fenced), b, targetLSN)
}

// setState sets the move's state.
func (j journal) setState(ctx context.Context, id int64, st State) error {
	return j.s.SetMoveState(ctx, id, string(st))
}

// ActiveMoves returns the unfinished moves (running, reversible, rolling
// back), oldest first: what `shardctl status` shows.
func ActiveMoves(ctx context.Context, cat *catalog.Catalog) ([]Move, error) {
	return movesOf(cat.Moves().OpenMoves(ctx))
}

// RecentMoves returns the newest n moves, finished or not, newest first.
func RecentMoves(ctx context.Context, cat *catalog.Catalog, n int) ([]Move, error) {
	return movesOf(cat.Moves().RecentMoves(ctx, n))
}

func movesOf(rs []catalogmove.MoveRow, err error) ([]Move, error) {
	if err != nil {
		return nil, err
	}
	ms := make([]Move, len(rs))
	for i, r := range rs {
		if ms[i], err = moveOf(r); err != nil {
			return nil, err
		}
	}
	return ms, nil
}
