package rebalance

import (
	"context"
	"errors"
	"fmt"

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
	UPDATE shardkit.shard_map SET state = $3, version = (SELECT map_version FROM v), updated_at = now()
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
	// sqlFenceJournal: map state $3 for shard $1 on server $2; move $4 at
	// step $5, doing $6. No row back: the shard is not on $2.
	sqlFenceJournal = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version),
	m AS (UPDATE shardkit.shard_map SET state = $3, version = (SELECT map_version FROM v), updated_at = now()
		WHERE shard = $1 AND server = $2 RETURNING 1)
	UPDATE shardkit.moves SET step = $5, doing = nullif($6, ''), error = NULL, updated_at = now()
	WHERE id = $4 AND EXISTS (SELECT 1 FROM m) RETURNING id`
	// sqlFlipJournal: shard $1 from $2 to $3, active; move $4 at step $5,
	// doing $6, with its LSNs and sequence value. No row back: the shard
	// is on neither server.
	sqlFlipJournal = `WITH v AS (UPDATE shardkit.config SET map_version = map_version + 1 RETURNING map_version),
	f AS (UPDATE shardkit.shard_map SET server = $3, state = 'active', version = (SELECT map_version FROM v), updated_at = now()
		WHERE shard = $1 AND server IN ($2, $3) RETURNING 1)
	UPDATE shardkit.moves SET step = $5, doing = nullif($6, ''), error = NULL,
		final_lsn = nullif($7, '')::pg_lsn, target_lsn = nullif($8, '')::pg_lsn, seq_value = nullif($9::bigint, 0),
		updated_at = now()
	WHERE id = $4 AND (SELECT count(*) FROM f) = 1 RETURNING id`
)

// fenceJournalled fences the shard on server and records step s done (and
// next under way) in one catalog statement.
func fenceJournalled(ctx context.Context, cat *pgxpool.Conn, m *Move, server string, st router.ShardState, s, next Step) error {
	var id int64
	err := cat.QueryRow(ctx, stmtFenceJournal,
		m.Shard, server, string(st), m.ID, string(s), string(next)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("set shard %d %s: the shard is not on %s", m.Shard, st, server)
	}
	if err != nil {
		return fmt.Errorf("set shard %d %s: %w", m.Shard, st, err)
	}
	return nil
}

// flipJournalled places the shard on to, active, and records step s done
// (and next under way) with the move's LSNs and sequence value, in one
// catalog statement. Running it again is harmless.
func flipJournalled(ctx context.Context, cat *pgxpool.Conn, m *Move, from, to string, s, next Step) error {
	var id int64
	err := cat.QueryRow(ctx, stmtFlipJournal,
		m.Shard, from, to, m.ID, string(s), string(next), m.FinalLSN, m.TargetLSN, m.SeqValue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("flip shard %d to %s: the shard is on neither %s nor %s", m.Shard, to, from, to)
	}
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", m.Shard, to, err)
	}
	return nil
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
