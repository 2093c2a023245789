package backup

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/rowsum"
	"github.com/shardkit/shardkit/router"
)

// DumpOptions tune Dump. The zero value is ready to use.
type DumpOptions struct {
	// PGBin is the directory of pg_dump. Empty means $SHARDKIT_PG_BIN, the
	// newest /usr/lib/postgresql/*/bin, or $PATH.
	PGBin string
}

// Dump writes one logical shard to w: the manifest, then a pg_dump
// custom-format archive of its schema (tables, rows, id_seq, next_id()),
// both from one snapshot on the shard's current home. Writes to the shard
// go on while it runs; the dump holds the rows committed when it started.
func Dump(ctx context.Context, cat *catalog.Catalog, shard int, w io.Writer, opts DumpOptions) (*Manifest, error) {
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return nil, err
	}
	p, err := snap.Placement(shard)
	if err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: %w", shard, err)
	}
	srv, _ := snap.Server(p.Server)
	m := &Manifest{Shard: shard, Schema: p.Schema, Server: p.Server, MapVersion: snap.Version, Shards: snap.Shards, Layout: snap.Layout}
	// Only the server's recorded primary: an old primary back after a
	// failover is writable too, and has not the rows written since.
	pc, err := pgx.ParseConfig(srv.Admin())
	if err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: server %s: %w", shard, p.Server, err)
	}
	router.Fence(&pc.Config, p.Server, srv.Primary)
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: connect to server %s: %w", shard, p.Server, err)
	}
	defer conn.Close(context.Background())
	// pg_dump goes to the host this connection reached, which it must to
	// import the snapshot, and which the fence chose.
	var at *pgdsn.HostPort
	if h, ok := pgdsn.HostAt(pgdsn.Hosts(&pc.Config), conn.PgConn().Conn().RemoteAddr()); ok {
		at = &h
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: %w", shard, err)
	}
	// Read-only: rolling back is how it ends, after pg_dump is done with
	// the exported snapshot.
	defer func() { _ = tx.Rollback(context.Background()) }()
	snapshot, err := readManifest(ctx, tx, m)
	if err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d from server %s: %w", shard, p.Server, err)
	}
	if err := writeHeader(w, m); err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: write: %w", shard, err)
	}
	cmd, stderr, err := commandAt(ctx, opts.PGBin, "pg_dump", srv.Admin(), at,
		"--format=custom", "--schema="+m.Schema, "--snapshot="+snapshot, "--no-publications", "--no-subscriptions")
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("shardkit: dump shard %d: %w", shard, &ToolError{Tool: "pg_dump", Stderr: stderr.String(), Err: err})
	}
	return m, nil
}

// readManifest fills m from the transaction's snapshot and returns the
// snapshot's name for pg_dump.
func readManifest(ctx context.Context, tx pgx.Tx, m *Manifest) (string, error) {
	var snapshot string
	if err := tx.QueryRow(ctx, sqlExportSnapshot).Scan(&snapshot, &m.TakenAt); err != nil {
		return "", err
	}
	var ok bool
	if err := tx.QueryRow(ctx, sqlSchemaExists, m.Schema).Scan(&ok); err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%w: schema %s is not there; check the shard map (migrations.Status) and the server", ErrNoSchema, m.Schema)
	}
	if _, err := tx.Exec(ctx, rowsum.Settings); err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, sqlVersions, m.Schema)
	if err != nil {
		return "", fmt.Errorf("read the schema's SQL versions: %w", err)
	}
	m.Versions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SQLVersion, error) {
		var v SQLVersion
		err := r.Scan(&v.Version, &v.Part, &v.Name, &v.AppliedAt)
		return v, err
	})
	if err != nil {
		return "", fmt.Errorf("read the schema's SQL versions: %w", err)
	}
	rows, err = tx.Query(ctx, sqlSequences, m.Schema)
	if err != nil {
		return "", err
	}
	m.Sequences, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sequence, error) {
		var s Sequence
		err := r.Scan(&s.Name, &s.LastValue)
		return s, err
	})
	if err != nil {
		return "", fmt.Errorf("read the schema's sequences: %w", err)
	}
	type tbl struct {
		name  string
		hasID bool
	}
	rows, err = tx.Query(ctx, sqlTables, m.Schema)
	if err != nil {
		return "", err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tbl, error) {
		var t tbl
		err := r.Scan(&t.name, &t.hasID)
		return t, err
	})
	if err != nil {
		return "", fmt.Errorf("list the schema's tables: %w", err)
	}
	for _, t := range tables {
		qt := pgx.Identifier{m.Schema, t.name}.Sanitize()
		s := Table{Name: t.name}
		if err := tx.QueryRow(ctx, rowsum.Query(m.Schema, t.name)).Scan(&s.Rows, &s.Sum); err != nil {
			return "", fmt.Errorf("checksum %s: %w", qt, err)
		}
		m.Tables = append(m.Tables, s)
		if t.hasID {
			var id int64
			if err := tx.QueryRow(ctx, fmt.Sprintf(sqlNewestID, qt)).Scan(&id); err != nil {
				return "", fmt.Errorf("newest id of %s: %w", qt, err)
			}
			m.NewestID = max(m.NewestID, id)
		}
	}
	return snapshot, nil
}
