package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/router"
)

// Tx is a catalog transaction, for the writes of provisioning that must
// commit together: the configuration, the servers, the first shard map
// and the per-shard SQL record. Its methods are the only ways to make them.
type Tx struct{ tx pgx.Tx }

// Update runs fn in one catalog transaction, committed when fn returns nil
// and rolled back otherwise.
func (c *Catalog) Update(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error { return fn(ctx, &Tx{tx: tx}) })
}

// Moves returns the part of the move store that reads in t: what
// provisioning and migrations check under LockProvision. Like
// Catalog.Moves, it is for shardkit's own packages.
func (t *Tx) Moves() catalogmove.InTx { return catalogmove.InTxOf(t.tx) }

// Statements of provisioning.
const (
	sqlProvisionLock = `SELECT pg_advisory_xact_lock(hashtext('shardkit.provision'))`
	sqlConfigRow     = `SELECT shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits,
	coalesce(to_jsonb(c) ->> 'app_role', '` + DefaultAppRole + `') FROM shardkit.config c`
	sqlConfigInsert = `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, app_role)
VALUES ($1, $2, $3, $4, $5, $6, coalesce(nullif($7, ''), '` + DefaultAppRole + `'))`
	sqlConfigRole  = `UPDATE shardkit.config SET app_role = $1`
	sqlMapCount    = `SELECT count(*) FROM shardkit.shard_map`
	sqlMapBump     = `UPDATE shardkit.config SET map_version = map_version + 1`
	sqlMapVersion  = `SELECT map_version FROM shardkit.config`
	sqlMapInitRows = `INSERT INTO shardkit.shard_map (shard, server, version)
SELECT s, srv, $3 FROM unnest($1::int[], $2::text[]) AS u(s, srv)`
)

// LockProvision serialises provisioning runs: it holds until the
// transaction ends.
func (t *Tx) LockProvision(ctx context.Context) error {
	_, err := t.tx.Exec(ctx, sqlProvisionLock)
	return err
}

// ConfigRow reads the configuration as stored, without validating it, and
// reports whether there is one.
func (t *Tx) ConfigRow(ctx context.Context) (Config, bool, error) {
	var have Config
	var tb, sb, qb, lb int16
	err := t.tx.QueryRow(ctx, sqlConfigRow).Scan(&have.Shards, &have.Layout.EpochMs, &tb, &sb, &qb, &lb, &have.AppRole)
	if errors.Is(err, pgx.ErrNoRows) {
		return Config{}, false, nil
	}
	if err != nil {
		return Config{}, false, err
	}
	have.Layout.TimeBits, have.Layout.ShardBits, have.Layout.SeqBits, have.Layout.SlotBits = uint8(tb), uint8(sb), uint8(qb), uint8(lb)
	return have, true, nil
}

// InsertConfig writes the configuration of a new catalog.
func (t *Tx) InsertConfig(ctx context.Context, cfg Config) error {
	l := cfg.Layout
	_, err := t.tx.Exec(ctx, sqlConfigInsert, cfg.Shards, l.EpochMs, int16(l.TimeBits),
		int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits), cfg.AppRole)
	return err
}

// SetAppRole records the application's group role (catalog.Config.AppRole).
func (t *Tx) SetAppRole(ctx context.Context, role string) error {
	if err := validateRole(role); err != nil {
		return err
	}
	_, err := t.tx.Exec(ctx, sqlConfigRole, role)
	return err
}

// MappedShards counts the shards the map places.
func (t *Tx) MappedShards(ctx context.Context) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx, sqlMapCount).Scan(&n)
	return n, err
}

// BumpMapVersion makes a new map version: routers reload at commit.
func (t *Tx) BumpMapVersion(ctx context.Context) error {
	_, err := t.tx.Exec(ctx, sqlMapBump)
	return err
}

// InitMap records the first shard map, at the current map version: shard
// s on servers[s]. It refuses a map that already has rows.
func (t *Tx) InitMap(ctx context.Context, servers []string) error {
	n, err := t.MappedShards(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("shardkit: %w: the shard map already places %d shards", router.ErrBadCatalog, n)
	}
	var version int64
	if err := t.tx.QueryRow(ctx, sqlMapVersion).Scan(&version); err != nil {
		return err
	}
	nums := make([]int32, len(servers))
	for s := range servers {
		nums[s] = int32(s)
	}
	_, err = t.tx.Exec(ctx, sqlMapInitRows, nums, servers, version)
	return err
}

// ShardSQL is one of the application's per-shard SQL files as recorded in
// the catalog (catalog version 3).
type ShardSQL struct {
	Version int
	Part    string // "tables" or "indexes"
	Name    string // file name
	Body    string
	SHA256  string // hex
}

// Statements on the record of per-shard SQL.
const (
	sqlShardSQLAll = `SELECT version, part, name, body, sha256 FROM shardkit.shard_sql ORDER BY version, part`
	sqlShardSQLAdd = `INSERT INTO shardkit.shard_sql (version, part, name, body, sha256) VALUES ($1, $2, $3, $4, $5)`
	sqlShardSQLSet = `UPDATE shardkit.shard_sql SET name = $3, body = $4, sha256 = $5, recorded_at = now()
WHERE version = $1 AND part = $2`
)

func readShardSQL(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]ShardSQL, error) {
	rows, err := q.Query(ctx, sqlShardSQLAll)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ShardSQL, error) {
		var f ShardSQL
		err := r.Scan(&f.Version, &f.Part, &f.Name, &f.Body, &f.SHA256)
		return f, err
	})
}

// ShardSQL reads the recorded per-shard SQL files, by version and part.
func (c *Catalog) ShardSQL(ctx context.Context) ([]ShardSQL, error) {
	return readShardSQL(ctx, c.pool)
}

// ShardSQL reads the recorded per-shard SQL files, by version and part.
func (t *Tx) ShardSQL(ctx context.Context) ([]ShardSQL, error) {
	return readShardSQL(ctx, t.tx)
}

// AddShardSQL records a per-shard SQL file not recorded yet.
func (t *Tx) AddShardSQL(ctx context.Context, f ShardSQL) error {
	_, err := t.tx.Exec(ctx, sqlShardSQLAdd, f.Version, f.Part, f.Name, f.Body, f.SHA256)
	return err
}

// ReplaceShardSQL replaces the record of (f.Version, f.Part). Callers make
// sure that no shard applied the recorded file.
func (t *Tx) ReplaceShardSQL(ctx context.Context, f ShardSQL) error {
	_, err := t.tx.Exec(ctx, sqlShardSQLSet, f.Version, f.Part, f.Name, f.Body, f.SHA256)
	return err
}
