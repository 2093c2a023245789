package catalogmove

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of the move journal. Test with errors.Is.
var (
	// ErrMoveOpen reports a shard that already has an unfinished move.
	ErrMoveOpen = errors.New("the shard has an unfinished move")
	// ErrNoOpenMove reports a shard with no unfinished move.
	ErrNoOpenMove = errors.New("no unfinished move of the shard")
)

// MoveRow is one row of the move journal (catalog version 4), as stored.
// Package rebalance gives it types and meaning (rebalance.Move).
type MoveRow struct {
	ID        int64
	Shard     int
	Source    string
	Target    string
	Mode      string
	State     string
	Step      string // last step finished
	Doing     string // step under way, "" when none
	Error     string // last error, "" when the last step succeeded
	FinalLSN  string // "" until set
	TargetLSN string // "" until set
	SeqValue  int64
	FencedMs  float64 // fenced window at cutover, ms
	Cutover   []byte  // the cutover's times as JSON; nil until cut over
	Started   time.Time
	Updated   time.Time
	Finished  *time.Time
	Tag       string // random, part of the move's replication object names; "" for moves journalled before catalog version 9
}

// Open reports whether the move is unfinished.
func (m MoveRow) Open() bool {
	return m.State == "running" || m.State == "reversible" || m.State == "rolling_back"
}

const moveColumns = `id, shard, source, target, mode, state, step, coalesce(doing, ''), coalesce(error, ''),
	coalesce(final_lsn::text, ''), coalesce(target_lsn::text, ''), coalesce(seq_value, 0), coalesce(fenced_ms, 0), cutover::text,
	started_at, updated_at, finished_at, coalesce(tag, '')`

func scanMove(r pgx.Row) (MoveRow, error) {
	var m MoveRow
	var cutover *string
	err := r.Scan(&m.ID, &m.Shard, &m.Source, &m.Target, &m.Mode, &m.State, &m.Step, &m.Doing, &m.Error,
		&m.FinalLSN, &m.TargetLSN, &m.SeqValue, &m.FencedMs, &cutover, &m.Started, &m.Updated, &m.Finished, &m.Tag)
	if cutover != nil && *cutover != "" {
		m.Cutover = []byte(*cutover)
	}
	return m, err
}

const (
	// sqlInsertMove journals a move only while no migration or
	// provisioning run holds the catalog (its lock, taken shared here,
	// is held until the row commits: a run that starts later sees it).
	sqlInsertMove = `INSERT INTO shardkit.moves (shard, source, target, mode)
		SELECT $1, $2, $3, $4 WHERE pg_try_advisory_xact_lock_shared(hashtext('shardkit.provision')) RETURNING ` + moveColumns
	sqlOpenMove = `SELECT ` + moveColumns + ` FROM shardkit.moves
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

// CreateMove journals a new move of shard from source to target, running,
// at step "created". A shard with an unfinished move is ErrMoveOpen; a
// migration or provisioning run in progress is ErrProvisionRunning.
func (c *Store) CreateMove(ctx context.Context, shard int, source, target, mode string) (MoveRow, error) {
	m, err := scanMove(c.pool.QueryRow(ctx, sqlInsertMove, shard, source, target, mode))
	if errors.Is(err, pgx.ErrNoRows) {
		return MoveRow{}, fmt.Errorf("shardkit: shard %d: %w: wait for it to end, then start the move", shard, ErrProvisionRunning)
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return MoveRow{}, fmt.Errorf("shardkit: shard %d: %w", shard, ErrMoveOpen)
		}
		return MoveRow{}, fmt.Errorf("shardkit: journal: %w", err)
	}
	return m, nil
}

// OpenMove returns the unfinished move of a shard, or ErrNoOpenMove.
func (c *Store) OpenMove(ctx context.Context, shard int) (MoveRow, error) {
	m, err := scanMove(c.pool.QueryRow(ctx, sqlOpenMove, shard))
	if errors.Is(err, pgx.ErrNoRows) {
		return MoveRow{}, fmt.Errorf("shardkit: shard %d: %w", shard, ErrNoOpenMove)
	}
	if err != nil {
		return MoveRow{}, fmt.Errorf("shardkit: journal: %w", err)
	}
	return m, nil
}

// OpenMoves returns the unfinished moves, oldest first.
func (c *Store) OpenMoves(ctx context.Context) ([]MoveRow, error) {
	return c.queryMoves(ctx, sqlOpenMoves)
}

// RecentMoves returns the newest n moves, finished or not, newest first.
func (c *Store) RecentMoves(ctx context.Context, n int) ([]MoveRow, error) {
	return c.queryMoves(ctx, sqlRecentMoves, n)
}

// OpenMoves returns the unfinished moves (running, reversible, rolling
// back), oldest first, read in the transaction. Under the catalog's
// Tx.LockProvision no move can be journalled until the transaction ends:
// CreateMove refuses with ErrProvisionRunning.
func (t InTx) OpenMoves(ctx context.Context) ([]MoveRow, error) {
	return queryMoves(ctx, t.q, sqlOpenMoves)
}

func (c *Store) queryMoves(ctx context.Context, sql string, args ...any) ([]MoveRow, error) {
	return queryMoves(ctx, c.pool, sql, args...)
}

func queryMoves(ctx context.Context, q querier, sql string, args ...any) ([]MoveRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MoveRow, error) { return scanMove(r) })
	if err != nil {
		return nil, fmt.Errorf("shardkit: read move journal: %w", err)
	}
	return ms, nil
}

func (c *Store) journal(ctx context.Context, sql string, args ...any) error {
	_, err := c.pool.Exec(ctx, sql, args...)
	return journalErr(err)
}

// BeginStep records step as under way.
func (c *Store) BeginStep(ctx context.Context, id int64, step string) error {
	return c.journal(ctx, sqlBeginStep, id, step)
}

// EndStep records step as the last one finished, none under way, and
// clears the error.
func (c *Store) EndStep(ctx context.Context, id int64, step string) error {
	return c.journal(ctx, sqlEndStep, id, step)
}

// StepDone is a finished step, the values the move has so far, and the
// next step, under way.
type StepDone struct {
	Step, Next          string
	FinalLSN, TargetLSN string // "": none
	SeqValue            int64  // 0: none
	FencedMs            float64
}

// FinishStep records d in one round trip.
func (c *Store) FinishStep(ctx context.Context, id int64, d StepDone) error {
	return c.journal(ctx, sqlStepDone, id, d.Step, d.Next, d.FinalLSN, d.TargetLSN, d.SeqValue, d.FencedMs)
}

// FailStep records the error of the step under way.
func (c *Store) FailStep(ctx context.Context, id int64, msg string) error {
	return c.journal(ctx, sqlFailStep, id, msg)
}

// RecordCutover records the fenced window of a cutover, its breakdown
// (JSON) and, when not "", the target's LSN.
func (c *Store) RecordCutover(ctx context.Context, id int64, fencedMs float64, times []byte, targetLSN string) error {
	return c.journal(ctx, sqlCutoverTimes, id, fencedMs, string(times), targetLSN)
}

// SetMoveState sets the move's state; completed and rolled_back also
// record when it finished.
func (c *Store) SetMoveState(ctx context.Context, id int64, state string) error {
	return c.journal(ctx, sqlSetState, id, state)
}
