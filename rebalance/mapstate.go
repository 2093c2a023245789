package rebalance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

const (
	sqlMapFlip = `UPDATE shardkit.shard_map SET server = $3, state = 'active', version = $4, updated_at = now()
		WHERE shard = $1 AND server IN ($2, $3)`
)

// sqlMapStateBump sets the state of shard $1 on server $2 to $3 in a new
// map version, in one statement: the configuration row's lock, which every
// map change takes, is held for the statement alone, not across round
// trips from the client (a cutover's fence waits on it).
const sqlMapStateBump = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version)
	UPDATE shardkit.shard_map SET state = $3, fence_until = NULL, version = (SELECT map_version FROM v), updated_at = now()
	WHERE shard = $1 AND server = $2`

// setMapState sets the state of a shard placed on server and bumps the map
// version (routers are notified at commit). A shard no longer on server is
// left alone.
func setMapState(ctx context.Context, cat *router.Catalog, shard int, server string, st router.ShardState) error {
	if _, err := cat.Pool().Exec(ctx, sqlMapStateBump, shard, server, string(st)); err != nil {
		return fmt.Errorf("set shard %d %s: %w", shard, st, err)
	}
	return nil
}

// flipMap places the shard on to, active, in a new map version. Running it
// again is harmless.
func flipMap(ctx context.Context, cat *router.Catalog, shard int, from, to string) error {
	_, err := cat.ChangeMap(ctx, func(ctx context.Context, tx pgx.Tx, v int64) error {
		tag, err := tx.Exec(ctx, sqlMapFlip, shard, from, to, v)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("shard %d is on neither %s nor %s", shard, from, to)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", shard, to, err)
	}
	return nil
}

// The cutover's map changes carry the journal in the same statement: one
// catalog round trip each inside the fenced window. Like Catalog.ChangeMap,
// each bumps the map version (routers are notified at commit by the
// trigger on shardkit.config) and serialises on the configuration row.
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
	// sqlPlacement: where shard $1 is and in which state.
	sqlPlacement = `SELECT server, state FROM shardkit.shard_map WHERE shard = $1`
)

// fenceJournalled sets the shard's state on server (fenced: with a lease
// of lease) and records step s done (and next under way) in one catalog
// statement.
func fenceJournalled(ctx context.Context, cat querier, sql string, m *Move, server string, st router.ShardState, lease time.Duration, s, next Step) error {
	var id int64
	err := cat.QueryRow(ctx, sql,
		m.Shard, server, string(st), m.ID, string(s), string(next), float64(lease)/float64(time.Millisecond)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("set shard %d %s: the shard is not on %s", m.Shard, st, server)
	}
	if err != nil {
		return fmt.Errorf("set shard %d %s: %w", m.Shard, st, err)
	}
	return nil
}

// flipJournalled places the shard, fenced on from, on to, active, and
// records step s done (and next under way) with the move's LSNs and
// sequence value, in one catalog statement. A shard found on to, active,
// was flipped already (by the fence watcher, or an earlier run): that is
// success too.
func flipJournalled(ctx context.Context, cat querier, sql string, m *Move, from, to string, s, next Step) error {
	var id int64
	err := cat.QueryRow(ctx, sql,
		m.Shard, from, to, m.ID, string(s), string(next), m.FinalLSN, m.TargetLSN, m.SeqValue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		var server, state string
		if err := cat.QueryRow(ctx, sqlPlacement, m.Shard).Scan(&server, &state); err != nil {
			return fmt.Errorf("flip shard %d to %s: %w", m.Shard, to, err)
		}
		if server == to && state == string(router.StateActive) {
			return nil
		}
		return fmt.Errorf("flip shard %d to %s: the shard is %s on %s, not fenced on %s: %w", m.Shard, to, state, server, from, ErrFenceLapsed)
	}
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", m.Shard, to, err)
	}
	return nil
}

// unfenceJournalled sets the shard, fenced on server (with fence_until
// until, when not nil), to state st, and the move back to step s with
// note as its error, in one catalog statement. It reports whether the
// shard was so fenced.
func unfenceJournalled(ctx context.Context, cat querier, m *Move, server string, st router.ShardState, s Step, until *time.Time, note string) (bool, error) {
	var id int64
	err := cat.QueryRow(ctx, sqlUnfenceJournal, m.Shard, server, string(st), m.ID, string(s), note, until).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("unfence shard %d: %w", m.Shard, err)
	}
	return true, nil
}

// Names of the window's catalog statements, prepared on the window's
// catalog connection before the fence (prepareWindow), so that inside the
// window each is one round trip without parse analysis.
const (
	stmtFenceJournal = "shardkit_fence_journal"
	stmtFlipJournal  = "shardkit_flip_journal"
)

// prepareWindow prepares the window's catalog statements on cat.
func prepareWindow(ctx context.Context, cat *pgxpool.Conn) error {
	for name, sql := range map[string]string{stmtFenceJournal: sqlFenceJournal, stmtFlipJournal: sqlFlipJournal} {
		if _, err := cat.Conn().Prepare(ctx, name, sql); err != nil {
			return fmt.Errorf("prepare %s on the catalog: %w", name, err)
		}
	}
	return nil
}
