package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/adminconn"
	"github.com/shardkit/shardkit/internal/lookuprow"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newLookupCmd) }

// errLookupBroken reports a lookup table that breaks its invariants
// (exit status 1).
var errLookupBroken = errors.New("lookup table does not match its owners")

func newLookupCmd() *cobra.Command {
	var table, column, idColumn string
	var repair bool
	cmd := &cobra.Command{
		Use:   "lookup --table T --column C [--repair]",
		Short: "Check a lookup table (a shard:\"lookup\" column) against its owner rows, and repair it",
		Long: `lookup reads every owner row of T and every row of T_C_lookup, in every
shard, and reports: owner rows with no lookup row naming them (missing),
lookup rows outside their value's shard (misplaced), values two owner rows
hold (duplicates), and lookup rows whose owner row is gone or holds another
value (orphans: harmless, the next write of the value takes them over).
It exits 1 when anything but orphans is found.

--repair deletes misplaced rows, drops orphans (each locked and rechecked
against its owner first, as the plugin does), and adds missing rows (never
over a live owner's). Duplicates are reported, never resolved. A repair
under live writes is safe, but may make a sign-up caught between its claim
and its write fail with ErrDuplicateLookup. Every table is read whole into
memory.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&table, "table", "", "owner table (required)")
	cmd.Flags().StringVar(&column, "column", "", "lookup column of the owner table (required)")
	cmd.Flags().StringVar(&idColumn, "id-column", "id", "owner table's ID column")
	cmd.Flags().BoolVar(&repair, "repair", false, "fix what can be fixed (see above)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if table == "" || column == "" {
			return fmt.Errorf("%w: --table and --column are required", errUsage)
		}
		ctx := cmd.Context()
		cat, err := openCatalog(ctx, getCatalog)
		if err != nil {
			return err
		}
		defer cat.Close()
		snap, err := cat.Load(ctx)
		if err != nil {
			return err
		}
		lk := &lookupCheck{snap: snap, table: table, column: column, id: idColumn, conns: map[string]*pgx.Conn{}}
		defer lk.close()
		rep, err := lk.check(ctx)
		if err != nil {
			return err
		}
		rep.write(cmd.OutOrStdout(), "")
		if repair {
			if err := lk.repair(ctx, rep); err != nil {
				return err
			}
			if rep, err = lk.check(ctx); err != nil {
				return err
			}
			rep.write(cmd.OutOrStdout(), "after repair: ")
		}
		if len(rep.missing)+len(rep.misplaced)+len(rep.duplicates) > 0 {
			return fmt.Errorf("%w: %s.%s", errLookupBroken, table, column)
		}
		return nil
	}
	return cmd
}

// lookupCheck reads one lookup table and its owners over every shard.
type lookupCheck struct {
	snap              *router.Snapshot
	table, column, id string
	name              string // the lookup table
	conns             map[string]*pgx.Conn
}

type lookupEntry struct {
	value string // canonical text
	owner int64
	shard int
}

type lookupReport struct {
	owners, rows int
	missing      []lookupEntry // owner rows without their lookup row
	misplaced    []lookupEntry
	orphans      []lookupEntry
	duplicates   []string
}

func (lk *lookupCheck) close() {
	for _, c := range lk.conns {
		_ = c.Close(context.Background())
	}
}

func (lk *lookupCheck) conn(ctx context.Context, shard int) (*pgx.Conn, router.Placement, error) {
	pl, err := lk.snap.Placement(shard)
	if err != nil {
		return nil, pl, err
	}
	if c, ok := lk.conns[pl.Server]; ok {
		return c, pl, nil
	}
	srv, ok := lk.snap.Server(pl.Server)
	if !ok {
		return nil, pl, fmt.Errorf("%w: %q", router.ErrUnknownServer, pl.Server)
	}
	cfg, err := adminconn.Config(srv, srv.Admin()) // only the server's recorded primary
	if err != nil {
		return nil, pl, err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, pl, fmt.Errorf("server %s: %w", pl.Server, err)
	}
	lk.conns[pl.Server] = c
	return c, pl, nil
}

func (lk *lookupCheck) check(ctx context.Context) (*lookupReport, error) {
	rep := &lookupReport{}
	lk.name = plugin.LookupTable(lk.table, lk.column)
	holders := map[string][]int64{}
	byValue := map[string]lookupEntry{}
	var rows []lookupEntry
	for s := 0; s < lk.snap.Shards; s++ {
		c, pl, err := lk.conn(ctx, s)
		if err != nil {
			return nil, err
		}
		q := fmt.Sprintf("SELECT %s::text, %s FROM %s WHERE %s IS NOT NULL", pgx.Identifier{lk.column}.Sanitize(),
			pgx.Identifier{lk.id}.Sanitize(), pgx.Identifier{pl.Schema, lk.table}.Sanitize(), pgx.Identifier{lk.column}.Sanitize())
		var v string
		var id int64
		read := func(q, table string, each func()) error {
			rows, err := c.Query(ctx, q)
			if err == nil {
				_, err = pgx.ForEachRow(rows, []any{&v, &id}, func() error { each(); return nil })
			}
			if err != nil {
				return fmt.Errorf("read %s.%s on %s: %w", pl.Schema, table, pl.Server, err)
			}
			return nil
		}
		if err := read(q, lk.table, func() {
			holders[v] = append(holders[v], id)
			rep.owners++
		}); err != nil {
			return nil, err
		}
		q = "SELECT value::text, owner_id FROM " + pgx.Identifier{pl.Schema, lk.name}.Sanitize()
		if err := read(q, lk.name, func() {
			rows = append(rows, lookupEntry{value: v, owner: id, shard: s})
			rep.rows++
		}); err != nil {
			return nil, err
		}
	}
	for _, e := range rows {
		want, err := plugin.LookupShard(e.value, lk.snap.Shards)
		if err != nil {
			return nil, err
		}
		switch {
		case e.shard != want:
			rep.misplaced = append(rep.misplaced, e)
		case !contains(holders[e.value], e.owner):
			rep.orphans = append(rep.orphans, e)
		default:
			byValue[e.value] = e
		}
	}
	for v, ids := range holders {
		if len(ids) > 1 {
			rep.duplicates = append(rep.duplicates, v)
		}
		for _, id := range ids {
			if e, ok := byValue[v]; !ok || e.owner != id {
				s, _ := plugin.LookupShard(v, lk.snap.Shards)
				rep.missing = append(rep.missing, lookupEntry{value: v, owner: id, shard: s})
			}
		}
	}
	sort.Strings(rep.duplicates)
	for _, l := range [][]lookupEntry{rep.missing, rep.misplaced, rep.orphans} {
		sort.Slice(l, func(i, j int) bool { return l[i].value < l[j].value })
	}
	return rep, nil
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func (r *lookupReport) write(w io.Writer, prefix string) {
	fmt.Fprintf(w, "%s%d owner rows, %d lookup rows: %d missing, %d misplaced, %d duplicate values, %d orphans\n",
		prefix, r.owners, r.rows, len(r.missing), len(r.misplaced), len(r.duplicates), len(r.orphans))
	const most = 20
	list := func(kind string, es []lookupEntry) {
		for i, e := range es {
			if i == most {
				fmt.Fprintf(w, "  %s: … %d more\n", kind, len(es)-most)
				return
			}
			fmt.Fprintf(w, "  %s: %q owner %d (shard %d)\n", kind, e.value, e.owner, e.shard)
		}
	}
	list("missing", r.missing)
	list("misplaced", r.misplaced)
	for i, v := range r.duplicates {
		if i == most {
			fmt.Fprintf(w, "  duplicate: … %d more\n", len(r.duplicates)-most)
			break
		}
		fmt.Fprintf(w, "  duplicate: %q\n", v)
	}
	list("orphan", r.orphans)
}

// repair deletes misplaced rows, drops orphans and adds missing rows.
func (lk *lookupCheck) repair(ctx context.Context, rep *lookupReport) error {
	for _, e := range rep.misplaced {
		c, pl, err := lk.conn(ctx, e.shard)
		if err != nil {
			return err
		}
		q := "DELETE FROM " + pgx.Identifier{pl.Schema, lk.name}.Sanitize() + " WHERE value::text = $1 AND owner_id = $2"
		if _, err := c.Exec(ctx, q, e.value, e.owner); err != nil {
			return fmt.Errorf("delete misplaced %q: %w", e.value, err)
		}
	}
	for _, e := range rep.orphans {
		if err := lk.dropIfOrphan(ctx, e); err != nil {
			return err
		}
	}
	for _, e := range rep.missing {
		c, pl, err := lk.conn(ctx, e.shard)
		if err != nil {
			return err
		}
		lq := pgx.Identifier{pl.Schema, lk.name}.Sanitize()
		var typ string // the value column's type, from the catalog
		if err := c.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'value'`, lq).Scan(&typ); err != nil {
			return fmt.Errorf("type of %s.value: %w", lq, err)
		}
		q := "INSERT INTO " + lq + " (value, owner_id) VALUES ($1::text::" + typ + ", $2) ON CONFLICT DO NOTHING"
		if _, err := c.Exec(ctx, q, e.value, e.owner); err != nil {
			return fmt.Errorf("add missing %q: %w", e.value, err)
		}
	}
	return nil
}

// dropIfOrphan deletes a lookup row if, locked, it still names the same
// owner and that owner row does not hold its value: the plugin's rule
// (lookuprow.DropIfOrphan).
func (lk *lookupCheck) dropIfOrphan(ctx context.Context, e lookupEntry) error {
	c, pl, err := lk.conn(ctx, e.shard)
	if err != nil {
		return err
	}
	lq := pgx.Identifier{pl.Schema, lk.name}.Sanitize()
	value := e.value // text; pgx binds it to a bigint column too
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	holds := func(ctx context.Context) (bool, error) {
		os, err := lk.snap.Layout.ShardOf(e.owner)
		if err != nil || os >= lk.snap.Shards {
			return false, nil // an ID no shard holds has no row
		}
		oc, opl, err := lk.conn(ctx, os)
		if err != nil {
			return false, err
		}
		var ok bool
		q := lookuprow.OwnerHolds(pgx.Identifier{opl.Schema, lk.table}.Sanitize(), lk.id, lk.column)
		if err := oc.QueryRow(ctx, q, e.owner, value).Scan(&ok); err != nil {
			return false, fmt.Errorf("check the owner of %q: %w", e.value, err)
		}
		return ok, nil
	}
	dropped, err := lookuprow.DropIfOrphan(ctx, pgxLookupTx{tx}, lq, value, e.owner, holds)
	if err != nil {
		return fmt.Errorf("drop orphan %q: %w", e.value, err)
	}
	if !dropped {
		return nil
	}
	return tx.Commit(ctx)
}

// pgxLookupTx is a pgx transaction as lookuprow runs in it.
type pgxLookupTx struct{ tx pgx.Tx }

func (t pgxLookupTx) LockOwner(ctx context.Context, q string, value any) (int64, bool, error) {
	var owner int64
	err := t.tx.QueryRow(ctx, q, value).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return owner, err == nil, err
}

func (t pgxLookupTx) Exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}
