package rebalance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// Step names a step of a move, as recorded in the journal.
type Step string

// Steps of an online move, in order. The journal's step column holds the
// last one finished; a mover resumes with the one after it.
const (
	StepCreated      Step = "created"        // journal row written
	StepMapMoving    Step = "map_moving"     // shard map state moving
	StepTargetSchema Step = "target_schema"  // schema and tables on the target
	StepPublication  Step = "publication"    // publication on the source
	StepSubscription Step = "subscription"   // subscription (and slot) on the target
	StepCopied       Step = "copied"         // every table synchronised
	StepIndexes      Step = "indexes"        // deferred secondary indexes built on the target
	StepCaughtUp     Step = "caught_up"      // target close behind the source
	StepFenced       Step = "fenced"         // shard map state fenced
	StepBarrier      Step = "barrier"        // source refuses writes; final LSN captured
	StepApplied      Step = "applied"        // target applied the final LSN
	StepReverseSlot  Step = "reverse_slot"   // publication and slot on the target for rollback
	StepSequences    Step = "sequences"      // sequences carried, target clock past the newest ID
	StepSealed       Step = "sealed"         // source barrier sealed before its fence lease lapsed
	StepFlipped      Step = "flipped"        // shard map points at the target, active
	StepReverse      Step = "reverse"        // forward replication gone, reverse replication running
	StepCleaned      Step = "cleaned"        // replication and the old copy removed
	StepCopiedOff    Step = "copied_offline" // offline mode: rows copied with COPY
	StepVerified     Step = "verified"       // offline mode: both sides verified equal
)

// onlineSteps is the order of an online move up to the point where it is
// reversible.
var onlineSteps = []Step{
	StepCreated, StepMapMoving, StepTargetSchema, StepPublication, StepSubscription,
	StepCopied, StepIndexes, StepCaughtUp, StepReverseSlot, StepFenced, StepBarrier, StepApplied,
	StepSequences, StepSealed, StepFlipped, StepReverse,
}

// offlineSteps is the order of an offline move.
var offlineSteps = []Step{
	StepCreated, StepMapMoving, StepTargetSchema, StepFenced, StepBarrier,
	StepCopiedOff, StepIndexes, StepVerified, StepSequences, StepFlipped,
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

// Mode is how a move copies data.
type Mode string

// Move modes.
const (
	ModeOnline  Mode = "online"  // logical replication, short fence at cutover
	ModeOffline Mode = "offline" // fence for the whole COPY (wal_level is not logical)
)

// Move is one row of the move journal.
type Move struct {
	ID        int64
	Shard     int
	Source    string
	Target    string
	Mode      Mode
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
}

// Open reports whether the move is unfinished (running, reversible or rolling back).
func (m Move) Open() bool {
	return m.State == StateRunning || m.State == StateReversible || m.State == StateRollingBack
}

const moveColumns = `id, shard, source, target, mode, state, step, coalesce(doing, ''), coalesce(error, ''),
	coalesce(final_lsn::text, ''), coalesce(target_lsn::text, ''), coalesce(seq_value, 0), coalesce(fenced_ms, 0), coalesce(cutover::text, ''),
	started_at, updated_at, finished_at`

func scanMove(r pgx.Row) (Move, error) {
	var m Move
	var mode, state, step, doing string
	var fencedMs float64
	var cutover string
	err := r.Scan(&m.ID, &m.Shard, &m.Source, &m.Target, &mode, &state, &step, &doing, &m.Error,
		&m.FinalLSN, &m.TargetLSN, &m.SeqValue, &fencedMs, &cutover, &m.Started, &m.Updated, &m.Finished)
	m.Mode, m.State, m.Step, m.Doing = Mode(mode), State(state), Step(step), Step(doing)
	m.FencedFor = fromMs(fencedMs)
	if err == nil && cutover != "" {
		if jerr := json.Unmarshal([]byte(cutover), &m.Cutover); jerr != nil {
			err = fmt.Errorf("move %d: cutover times %q: %w", m.ID, cutover, jerr)
		}
	}
	return m, err
}

const (
	sqlInsertMove = `INSERT INTO shardkit.moves (shard, source, target, mode) VALUES ($1, $2, $3, $4) RETURNING ` + moveColumns
	sqlOpenMove   = `SELECT ` + moveColumns + ` FROM shardkit.moves
		WHERE shard = $1 AND state IN ('running', 'reversible', 'rolling_back')`
	sqlOpenMoves = `SELECT ` + moveColumns + ` FROM shardkit.moves
		WHERE state IN ('running', 'reversible', 'rolling_back') ORDER BY id`
	sqlRecentMoves = `SELECT ` + moveColumns + ` FROM shardkit.moves ORDER BY id DESC LIMIT $1`
	sqlBeginStep   = `UPDATE shardkit.moves SET doing = $2, updated_at = now() WHERE id = $1`
	sqlEndStep     = `UPDATE shardkit.moves SET step = $2, doing = NULL, error = NULL, updated_at = now() WHERE id = $1`
	// sqlStepDone records a finished step, the values it produced, and the
	// next step as under way, in one round trip (it runs in the fenced window).
	sqlStepDone = `UPDATE shardkit.moves SET step = $2, doing = nullif($3, ''), error = NULL,
		final_lsn = nullif($4, '')::pg_lsn, target_lsn = nullif($5, '')::pg_lsn,
		seq_value = nullif($6::bigint, 0), fenced_ms = nullif($7::float8, 0), updated_at = now() WHERE id = $1`
	sqlFailStep = `UPDATE shardkit.moves SET error = $2, updated_at = now() WHERE id = $1`
	// sqlCutoverTimes records the fenced window and its breakdown once the
	// window has closed (it is not part of it).
	sqlCutoverTimes = `UPDATE shardkit.moves SET fenced_ms = $2, cutover = $3::jsonb,
		target_lsn = coalesce(nullif($4, '')::pg_lsn, target_lsn), updated_at = now() WHERE id = $1`
	sqlSetState = `UPDATE shardkit.moves SET state = $2, updated_at = now(),
		finished_at = CASE WHEN $2 IN ('completed', 'rolled_back') THEN now() END WHERE id = $1`
)

// journal reads and writes the move journal in the catalog.
type journal struct{ cat *router.Catalog }

func (j journal) create(ctx context.Context, shard int, source, target string, mode Mode) (Move, error) {
	m, err := scanMove(j.cat.Pool().QueryRow(ctx, sqlInsertMove, shard, source, target, string(mode)))
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return Move{}, fmt.Errorf("shardkit: shard %d: %w", shard, ErrMoveInProgress)
		}
		return Move{}, fmt.Errorf("shardkit: journal: %w", err)
	}
	return m, nil
}

// open returns the unfinished move of a shard, or ErrNoMove.
func (j journal) open(ctx context.Context, shard int) (Move, error) {
	m, err := scanMove(j.cat.Pool().QueryRow(ctx, sqlOpenMove, shard))
	if errors.Is(err, pgx.ErrNoRows) {
		return Move{}, fmt.Errorf("shardkit: shard %d: %w", shard, ErrNoMove)
	}
	if err != nil {
		return Move{}, fmt.Errorf("shardkit: journal: %w", err)
	}
	return m, nil
}

func (j journal) exec(ctx context.Context, sql string, args ...any) error {
	if _, err := j.cat.Pool().Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("shardkit: journal: %w", err)
	}
	return nil
}

// ActiveMoves returns the unfinished moves (running, reversible, rolling
// back), oldest first: what `shardctl status` shows.
func ActiveMoves(ctx context.Context, cat *router.Catalog) ([]Move, error) {
	return queryMoves(ctx, cat, sqlOpenMoves)
}

// RecentMoves returns the newest n moves, finished or not, newest first.
func RecentMoves(ctx context.Context, cat *router.Catalog, n int) ([]Move, error) {
	return queryMoves(ctx, cat, sqlRecentMoves, n)
}

func queryMoves(ctx context.Context, cat *router.Catalog, sql string, args ...any) ([]Move, error) {
	rows, err := cat.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Move, error) { return scanMove(r) })
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	return ms, nil
}
