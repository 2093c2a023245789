package shardschema

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/sqlversions"
)

//go:embed serversql/*.sql
var serverSQL embed.FS

// Advisory lock keys (first int4 of the two-key form). The second key is
// the shard number, or -1 for the whole server.
const (
	nextIDLockKey  int32 = 0x736b6964 // "skid": shardkit.next_id, per shard (session lock)
	migrateLockKey int32 = 0x736b6d67 // "skmg": migrations, per shard or -1 (transaction lock)
)

// Statements of the server-level migration machinery.
const (
	sqlServerBootstrap = `CREATE SCHEMA IF NOT EXISTS shardkit;
CREATE TABLE IF NOT EXISTS shardkit.server_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())`
	sqlServerVersion  = `SELECT coalesce(max(version), 0) FROM shardkit.server_migrations`
	sqlServerLayout   = `SELECT epoch_ms, time_bits, shard_bits, seq_bits, slot_bits FROM shardkit.server_layout`
	sqlServerLock     = `SELECT pg_advisory_xact_lock($1, -1)`
	sqlServerRecord   = `INSERT INTO shardkit.server_migrations (version, name) VALUES ($1, $2)`
	sqlShardLockBatch = `SELECT count(pg_advisory_xact_lock($1, s)) FROM unnest($2::int[]) AS s`
)

// templateVals are the integers rendered into shardkit's SQL templates.
type templateVals struct {
	EpochMs                                int64
	TimeBits, ShardBits, SeqBits, SlotBits int
	CounterBits, ShardSeqBits              int
	CounterMask                            int64
	LockKey                                int32
	Shard                                  int
}

func valsFor(l idgen.Layout, shard int) templateVals {
	return templateVals{
		EpochMs: l.EpochMs, TimeBits: int(l.TimeBits), ShardBits: int(l.ShardBits),
		SeqBits: int(l.SeqBits), SlotBits: int(l.SlotBits),
		CounterBits: int(l.CounterBits()), ShardSeqBits: int(l.ShardBits + l.SeqBits),
		CounterMask: 1<<l.CounterBits() - 1, LockKey: nextIDLockKey, Shard: shard,
	}
}

func render(name string, v templateVals) (string, error) {
	b, err := fs.ReadFile(serverSQL, "serversql/"+name)
	if err != nil {
		return "", err
	}
	t, err := template.New(name).Option("missingkey=error").Parse(string(b))
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, v); err != nil {
		return "", err
	}
	return out.String(), nil
}

type serverMigration struct {
	version int
	name    string
}

// serverMigrations lists the versioned server-level files (the per-shard
// template, which has no version, is not among them).
func serverMigrations() ([]serverMigration, error) {
	files, err := sqlversions.List(serverSQL, "serversql")
	if err != nil {
		return nil, err
	}
	out := make([]serverMigration, 0, len(files))
	for _, f := range files {
		out = append(out, serverMigration{version: f.Version, name: f.Name})
	}
	return out, nil
}

// EnsureServer installs or updates shardkit's server-level objects (schema
// shardkit: the layout row, the per-schema migration record,
// shardkit.next_id and the transaction decisions of plugin.Atomic) on one
// shard server, and checks that the server was provisioned with layout
// (ErrLayoutMismatch otherwise). It is cheap when nothing is to do.
// Provision and Migrate run it on every server. Errors are not wrapped in
// a server's name; callers that know it add it.
func EnsureServer(ctx context.Context, db DB, layout idgen.Layout) error {
	if err := layout.Validate(); err != nil {
		return fmt.Errorf("shardkit: %w", err)
	}
	ms, err := serverMigrations()
	if err != nil {
		return err
	}
	newest := ms[len(ms)-1].version
	// Fast path, without DDL, so a role without CREATE can call it on an
	// up-to-date server.
	if v, err := serverState(ctx, db, layout); err == nil && v >= newest {
		return nil
	} else if err != nil && !errors.Is(err, errNoServerSchema) {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlServerLock, migrateLockKey); err != nil {
			return Classify(err, "")
		}
		if _, err := tx.Exec(ctx, sqlServerBootstrap); err != nil {
			return privilegeError(ctx, tx, err)
		}
		var have int
		if err := tx.QueryRow(ctx, sqlServerVersion).Scan(&have); err != nil {
			return err
		}
		for _, m := range ms {
			if m.version <= have {
				continue
			}
			sql, err := render(m.name, valsFor(layout, 0))
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("server migration %s: %w", m.name, privilegeError(ctx, tx, err))
			}
			if _, err := tx.Exec(ctx, sqlServerRecord, m.version, m.name); err != nil {
				return err
			}
		}
		return checkServerLayout(ctx, tx, layout)
	})
}

var errNoServerSchema = errors.New("no shardkit schema on the server")

// serverState returns the server-level version, checking the layout when
// one is installed.
func serverState(ctx context.Context, db DB, layout idgen.Layout) (int, error) {
	var v int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlServerVersion).Scan(&v); err != nil {
			return err
		}
		if v == 0 {
			return nil
		}
		return checkServerLayout(ctx, tx, layout)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") {
		return 0, errNoServerSchema
	}
	return v, Classify(err, "USAGE on schema shardkit")
}

func checkServerLayout(ctx context.Context, tx pgx.Tx, want idgen.Layout) error {
	var got idgen.Layout
	var tb, sb, qb, lb int16
	if err := tx.QueryRow(ctx, sqlServerLayout).Scan(&got.EpochMs, &tb, &sb, &qb, &lb); err != nil {
		return err
	}
	got.TimeBits, got.ShardBits, got.SeqBits, got.SlotBits = uint8(tb), uint8(sb), uint8(qb), uint8(lb)
	if got != want {
		return fmt.Errorf("%w: the server was provisioned with %+v, the catalog wants %+v; "+
			"a server serves one catalog: use a fresh database for this catalog", ErrLayoutMismatch, got, want)
	}
	return nil
}

// privilegeError names the database privilege DDL on a server needs.
func privilegeError(ctx context.Context, tx pgx.Tx, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		return err
	}
	db := "the database"
	// The transaction is aborted; ask on a fresh statement only if possible.
	if c := tx.Conn(); c != nil {
		if cfg := c.Config(); cfg != nil && cfg.Database != "" {
			db = "database " + pgx.Identifier{cfg.Database}.Sanitize()
		}
	}
	return Classify(err, "CREATE on "+db+" (GRANT CREATE ON "+db+" TO the role) and ownership of the shardkit and shard_NNNN schemas")
}
