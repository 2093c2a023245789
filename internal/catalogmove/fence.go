package catalogmove

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

// A cutover's map changes carry the move journal in the same statement:
// one catalog round trip each inside the fenced window. Each bumps the map
// version and serialises on the configuration row.
const (
	// sqlFenceJournal: map state $3 for shard $1 on server $2, a fence
	// lease of $7 ms when $3 is fenced; move $4 at step $5, doing $6. No
	// row back: the shard is not on $2.
	sqlFenceJournal = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version),
	m AS (UPDATE shardkit.shard_map SET state = $3, version = (SELECT map_version FROM v), updated_at = now(),
		fence_until = CASE WHEN $3 = 'fenced' THEN now() + $7::float8 * interval '1 millisecond' END
		WHERE shard = $1 AND server = $2 RETURNING 1)
	UPDATE shardkit.moves SET step = $5, doing = nullif($6, ''), error = NULL, updated_at = now()
	WHERE id = $4 AND EXISTS (SELECT 1 FROM m) RETURNING id`
	// sqlFlipJournal: shard $1, fenced on $2, to $3, active; move $4 at
	// step $5, doing $6, with its LSNs and sequence value. No row back:
	// the shard is not fenced on $2 (flipped already, or unfenced).
	sqlFlipJournal = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version),
	f AS (UPDATE shardkit.shard_map SET server = $3, state = 'active', fence_until = NULL, version = (SELECT map_version FROM v), updated_at = now()
		WHERE shard = $1 AND server = $2 AND state = 'fenced' RETURNING 1)
	UPDATE shardkit.moves SET step = $5, doing = nullif($6, ''), error = NULL,
		final_lsn = coalesce(nullif($7, '')::pg_lsn, final_lsn), target_lsn = coalesce(nullif($8, '')::pg_lsn, target_lsn),
		seq_value = coalesce(nullif($9::bigint, 0), seq_value), updated_at = now()
	WHERE id = $4 AND (SELECT count(*) FROM f) = 1 RETURNING id`
	// sqlUnfenceJournal: shard $1, fenced on $2 (with fence_until $7 when
	// given), to state $3; move $4 back at step $5, its error $6. No row
	// back: the shard is not fenced on $2 (with that lease).
	sqlUnfenceJournal = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version),
	m AS (UPDATE shardkit.shard_map SET state = $3, fence_until = NULL, version = (SELECT map_version FROM v), updated_at = now()
		WHERE shard = $1 AND server = $2 AND state = 'fenced' AND ($7::timestamptz IS NULL OR fence_until = $7::timestamptz) RETURNING 1)
	UPDATE shardkit.moves SET step = $5, doing = NULL, error = nullif($6, ''), updated_at = now()
	WHERE id = $4 AND EXISTS (SELECT 1 FROM m) RETURNING id`

	sqlLapsedFences = `SELECT shard, server, fence_until, extract(epoch FROM fence_until - now())::float8 FROM shardkit.shard_map
	WHERE state = 'fenced' AND fence_until < now() ORDER BY shard`
	sqlFences = `SELECT shard, server, fence_until, extract(epoch FROM fence_until - now())::float8
	FROM shardkit.shard_map WHERE state = 'fenced' AND fence_until IS NOT NULL ORDER BY shard`
)

// FenceStep sets shard Shard on Server to State (fenced: with a lease of
// Lease, on the catalog's clock) and records move MoveID at Step, with
// Next under way.
type FenceStep struct {
	Shard      int
	Server     string
	State      router.ShardState
	Lease      time.Duration
	MoveID     int64
	Step, Next string
}

// FlipStep places shard Shard, fenced on From, on To, active, and records
// move MoveID at Step (Next under way) with its LSNs and sequence value
// ("" and 0 keep the recorded ones).
type FlipStep struct {
	Shard               int
	From, To            string
	MoveID              int64
	Step, Next          string
	FinalLSN, TargetLSN string
	SeqValue            int64
}

// UnfenceStep sets shard Shard, fenced on Server (with fence_until Until
// when not nil), to State, and move MoveID back at Step with Note as its
// error.
type UnfenceStep struct {
	Shard  int
	Server string
	State  router.ShardState
	Until  *time.Time
	MoveID int64
	Step   string
	Note   string
}

type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func fenceMove(ctx context.Context, q rowQuerier, sql string, s FenceStep) error {
	var id int64
	err := q.QueryRow(ctx, sql, s.Shard, s.Server, string(s.State), s.MoveID, s.Step, s.Next,
		float64(s.Lease)/float64(time.Millisecond)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("set shard %d %s: %w: the shard is not on %s", s.Shard, s.State, ErrNotPlaced, s.Server)
	}
	if err != nil {
		return fmt.Errorf("set shard %d %s: %w", s.Shard, s.State, err)
	}
	return nil
}

func flipMove(ctx context.Context, q rowQuerier, sql string, s FlipStep) (bool, error) {
	var id int64
	err := q.QueryRow(ctx, sql, s.Shard, s.From, s.To, s.MoveID, s.Step, s.Next, s.FinalLSN, s.TargetLSN, s.SeqValue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("flip shard %d to %s: %w", s.Shard, s.To, err)
	}
	return true, nil
}

// FenceMove makes s in one catalog statement. A shard not on s.Server is
// ErrNotPlaced.
func (c *Store) FenceMove(ctx context.Context, s FenceStep) error {
	return fenceMove(ctx, c.pool, sqlFenceJournal, s)
}

// FlipMove makes s in one catalog statement and reports whether the shard
// was fenced on s.From (false: nothing changed).
func (c *Store) FlipMove(ctx context.Context, s FlipStep) (bool, error) {
	return flipMove(ctx, c.pool, sqlFlipJournal, s)
}

// UnfenceMove makes s in one catalog statement and reports whether the
// shard was so fenced (false: nothing changed).
func (c *Store) UnfenceMove(ctx context.Context, s UnfenceStep) (bool, error) {
	var id int64
	err := c.pool.QueryRow(ctx, sqlUnfenceJournal, s.Shard, s.Server, string(s.State), s.MoveID, s.Step, s.Note, s.Until).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unfence shard %d: %w", s.Shard, err)
	}
	return true, nil
}

// Window is one catalog connection held for a cutover's fenced window,
// with the window's statements prepared on it: inside the window each
// change is one round trip, with no pool wait and no parse analysis.
type Window struct{ conn *pgxpool.Conn }

// Names of the window's prepared statements.
const (
	stmtFenceJournal = "shardkit_fence_journal"
	stmtFlipJournal  = "shardkit_flip_journal"
)

// Window acquires a connection for a cutover's window and prepares its
// statements. Release it when the window has closed.
func (c *Store) Window(ctx context.Context) (*Window, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the catalog: %w", err)
	}
	for name, sql := range map[string]string{stmtFenceJournal: sqlFenceJournal, stmtFlipJournal: sqlFlipJournal} {
		if _, err := conn.Conn().Prepare(ctx, name, sql); err != nil {
			conn.Release()
			return nil, fmt.Errorf("prepare %s on the catalog: %w", name, err)
		}
	}
	return &Window{conn: conn}, nil
}

// Release gives the connection back.
func (w *Window) Release() { w.conn.Release() }

// Ping is one round trip to the catalog.
func (w *Window) Ping(ctx context.Context) error { return w.conn.Ping(ctx) }

// FenceMove is Store.FenceMove on the window's connection.
func (w *Window) FenceMove(ctx context.Context, s FenceStep) error {
	return fenceMove(ctx, w.conn, stmtFenceJournal, s)
}

// FlipMove is Store.FlipMove on the window's connection.
func (w *Window) FlipMove(ctx context.Context, s FlipStep) (bool, error) {
	return flipMove(ctx, w.conn, stmtFlipJournal, s)
}

// Placement is Store.Placement (catalog's Placement) on the window's connection.
func (w *Window) Placement(ctx context.Context, shard int) (string, router.ShardState, error) {
	return Placement(ctx, w.conn, shard)
}

// Fence is a shard fenced under a lease, as the catalog records it.
type Fence struct {
	Shard  int
	Server string
	Until  time.Time     // when the lease lapses, on the catalog's clock
	Left   time.Duration // until then (negative: lapsed)
}

func (c *Store) fences(ctx context.Context, sql string) ([]Fence, error) {
	rows, err := c.pool.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("shardkit: read fenced shards: %w", err)
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Fence, error) {
		var f Fence
		var left float64
		err := r.Scan(&f.Shard, &f.Server, &f.Until, &left)
		f.Left = time.Duration(left * float64(time.Second))
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("shardkit: read fenced shards: %w", err)
	}
	return fs, nil
}

// Fences returns the shards fenced under a lease now, by shard.
func (c *Store) Fences(ctx context.Context) ([]Fence, error) { return c.fences(ctx, sqlFences) }

// LapsedFences returns the shards fenced under a lease that lapsed, on the
// catalog's clock, by shard.
func (c *Store) LapsedFences(ctx context.Context) ([]Fence, error) {
	return c.fences(ctx, sqlLapsedFences)
}
