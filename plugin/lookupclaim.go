package plugin

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/lookuprow"
	"github.com/shardkit/shardkit/router"
)

// The claim, hold and drop steps of a lookup value's reservation (the
// protocol is described in lookupwrite.go).

// reserve claims every reservation, then holds them all.
func (p *Plugin) reserve(ctx context.Context, snap *router.Snapshot, m *model, rs []*reservation) (*reserved, error) {
	res := &reserved{m: m, rs: rs}
	if len(rs) == 0 {
		return res, nil
	}
	// One order for every writer: claims and holds never wait in a cycle.
	slices.SortFunc(rs, func(a, b *reservation) int {
		return cmp.Or(cmp.Compare(a.lc.table, b.lc.table), cmp.Compare(a.key, b.key))
	})
	for i := 1; i < len(rs); i++ {
		if rs[i].lc == rs[i-1].lc && rs[i].key == rs[i-1].key {
			return nil, fmt.Errorf("shardkit: %w: %s %q twice in one statement", ErrDuplicateLookup, rs[i].lc.column, rs[i].key)
		}
	}
	for _, r := range rs {
		if err := p.claim(ctx, snap, m, r); err != nil {
			p.abandon(ctx, res)
			return nil, err
		}
	}
	// A claim that met a moved shard reloaded the map: hold on that one.
	if cur := p.router.Snapshot(); cur.Version > snap.Version {
		snap = cur
	}
	err := p.hold(ctx, snap, res)
	if moved, ok := p.movedHome(ctx, err); ok {
		p.unhold(res)
		err = p.hold(ctx, moved, res)
	}
	if err != nil {
		p.unhold(res)
		p.abandon(ctx, res)
		return nil, err
	}
	return res, nil
}

// unhold rolls back a write's holds.
func (p *Plugin) unhold(res *reserved) {
	for _, tx := range res.holds {
		_ = tx.Rollback()
	}
	res.holds = nil
}

// movedHome reports a lookup statement that the old home of its shard
// refused because the shard moved (lookupErr made it ErrShardMoved), and
// returns the map that places the shard on its new home, to run the
// statement there once more: what runWrite does for the row's own write,
// through the same wait (awaitMove, at most Config.FenceWait).
func (p *Plugin) movedHome(ctx context.Context, err error) (*router.Snapshot, bool) {
	var se *ShardError
	if !errors.Is(err, ErrShardMoved) || !errors.As(err, &se) {
		return nil, false
	}
	snap, _, werr := p.awaitMove(ctx, se.Shard, se.Server)
	return snap, werr == nil
}

// abandon drops the lookup rows a failed write claimed, if orphaned.
func (p *Plugin) abandon(ctx context.Context, res *reserved) {
	for _, r := range res.rs {
		if r.took {
			_ = p.dropIfOrphan(ctx, res.m, r) // a leftover orphan is reclaimable
		}
	}
}

// lookupDB returns a lookup pool (see lookupPools) of the server holding
// a lookup row's shard; a write to a fenced shard waits for the move like
// any write.
func (p *Plugin) lookupDB(ctx context.Context, snap *router.Snapshot, shard int, hold bool) (*sql.DB, router.Placement, error) {
	pl, err := snap.Placement(shard)
	if err != nil {
		return nil, pl, err
	}
	if pl.State == router.StateFenced {
		if snap, pl, err = p.waitFence(ctx, shard); err != nil {
			return nil, pl, err
		}
	}
	db, err := p.lookups.get(snap, pl.Server, hold)
	return db, pl, err
}

// lookupErr gives a lookup table's error its place, and turns a moved
// shard's refusal (see movedFrom) into the retriable ErrShardMoved.
func (p *Plugin) lookupErr(ctx context.Context, r *reservation, pl router.Placement, err error) error {
	if router.IsFenceError(err) {
		_, _ = p.router.Reload(ctx) // so that the statement's next run finds the new home
	}
	if p.movedFrom(ctx, r.shard, pl.Server, err) {
		err = fmt.Errorf("%w: %w", ErrShardMoved, err)
	}
	return &ShardError{Shard: r.shard, Server: pl.Server, Table: r.lc.table, Err: err}
}

const (
	sqlClaim    = "INSERT INTO %s (value, owner_id) VALUES ($1, $2)"
	sqlHold     = "UPDATE %s SET owner_id = owner_id WHERE value = $1 AND owner_id = $2"
	sqlTakeOver = "UPDATE %s SET owner_id = $3 WHERE value = $1 AND owner_id = $2"
)

// claimAttempts bounds the rounds of a claim whose lookup row comes and
// goes under it (deleted between the insert's conflict and the lock).
const claimAttempts = 5

// claim inserts a lookup row, or takes over an orphaned one (step 1). A
// claim the old home of a moved shard refused runs once more on the new
// home.
func (p *Plugin) claim(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) error {
	retried := false
	for range claimAttempts {
		done, err := p.claimOnce(ctx, snap, m, r)
		if moved, ok := p.movedHome(ctx, err); ok && !retried {
			snap, retried = moved, true
			continue
		}
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("shardkit: %w: %s %q: its lookup row kept changing under %d attempts", ErrDuplicateLookup, r.lc.column, r.key, claimAttempts)
}

// claimOnce is one round of claim; it reports false when the lookup row
// went away between the insert's conflict and the lock (claim again).
func (p *Plugin) claimOnce(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) (bool, error) {
	db, pl, err := p.lookupDB(ctx, snap, r.shard, false)
	if err != nil {
		return false, err
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf(sqlClaim, r.lc.quoted[r.shard]), r.value, r.owner)
	if err == nil {
		r.took = true
		return true, nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	return p.reclaim(ctx, db, pl, m, r, pe)
}

// reclaim handles a claim's unique violation: the value is ours already,
// or taken, or held by an orphan, which it takes over. It reports false
// when the lookup row went away meanwhile (claim again).
func (p *Plugin) reclaim(ctx context.Context, db *sql.DB, pl router.Placement, m *model, r *reservation, dup error) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	defer func() { _ = tx.Rollback() }()
	q := r.lc.quoted[r.shard]
	var owner int64
	err = tx.QueryRowContext(ctx, fmt.Sprintf(lookuprow.LockRow, q), r.value).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	if owner == r.owner {
		return true, nil // the row's own value (an update that keeps it)
	}
	holds, err := p.ownerHolds(ctx, m, r.lc, owner, r.value)
	if err != nil {
		return false, err
	}
	if holds {
		return true, fmt.Errorf("shardkit: %w: %s %q: %w", ErrDuplicateLookup, r.lc.column, r.key, dup)
	}
	res, err := tx.ExecContext(ctx, fmt.Sprintf(sqlTakeOver, q), r.value, owner, r.owner)
	if err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, nil
	}
	if err := tx.Commit(); err != nil {
		return false, p.lookupErr(ctx, r, pl, err)
	}
	r.took = true
	return true, nil
}

// ownerHolds reports whether an owner row exists and holds the value. It
// reads a freshly loaded shard map: with a stale one, an owner row on the
// new home of a moved shard would look missing.
func (p *Plugin) ownerHolds(ctx context.Context, m *model, lc *lookupCol, owner int64, value any) (bool, error) {
	snap, err := p.router.Reload(ctx)
	if err != nil {
		return false, fmt.Errorf("shardkit: check the owner of a lookup row: %w", err)
	}
	s, err := shardOfID(owner, snap)
	if err != nil {
		return false, nil // an ID no shard holds has no row
	}
	pl, err := snap.Placement(s)
	if err != nil {
		return false, err
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return false, err
	}
	q := lookuprow.OwnerHolds(m.quoted[s], m.pk.DBName, lc.column)
	var ok bool
	if err := srv.QueryRowContext(ctx, q, owner, value).Scan(&ok); err != nil {
		return false, &ShardError{Shard: s, Server: pl.Server, Table: m.table, Err: fmt.Errorf("check the owner of a lookup row: %w", err)}
	}
	return ok, nil
}

// hold locks every claimed row until release (step 2), one transaction
// per server, servers in name order.
func (p *Plugin) hold(ctx context.Context, snap *router.Snapshot, res *reserved) error {
	type group struct {
		server string
		pl     router.Placement
		db     *sql.DB
		rs     []*reservation
	}
	var groups []*group
	for _, r := range res.rs {
		db, pl, err := p.lookupDB(ctx, snap, r.shard, true)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.server == pl.Server })
		if i < 0 {
			groups = append(groups, &group{server: pl.Server, pl: pl, db: db})
			i = len(groups) - 1
		}
		groups[i].rs = append(groups[i].rs, r)
	}
	slices.SortFunc(groups, func(a, b *group) int { return cmp.Compare(a.server, b.server) })
	for _, g := range groups {
		tx, err := g.db.BeginTx(ctx, nil)
		if err != nil {
			return p.lookupErr(ctx, g.rs[0], g.pl, err)
		}
		res.holds = append(res.holds, tx)
		for _, r := range g.rs {
			out, err := tx.ExecContext(ctx, fmt.Sprintf(sqlHold, r.lc.quoted[r.shard]), r.value, r.owner)
			if err != nil {
				return p.lookupErr(ctx, r, g.pl, err)
			}
			if n, _ := out.RowsAffected(); n != 1 {
				return fmt.Errorf("shardkit: %w: %s %q was taken by a concurrent write", ErrDuplicateLookup, r.lc.column, r.key)
			}
		}
	}
	return nil
}

// dropIfOrphan deletes a lookup row if it still names owner and the owner
// row does not hold its value; on the new home too when the shard moved.
func (p *Plugin) dropIfOrphan(ctx context.Context, m *model, r *reservation) error {
	err := p.dropOnce(ctx, p.router.Snapshot(), m, r)
	if moved, ok := p.movedHome(ctx, err); ok {
		err = p.dropOnce(ctx, moved, m, r)
	}
	return err
}

func (p *Plugin) dropOnce(ctx context.Context, snap *router.Snapshot, m *model, r *reservation) error {
	db, pl, err := p.lookupDB(ctx, snap, r.shard, false)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return p.lookupErr(ctx, r, pl, err)
	}
	defer func() { _ = tx.Rollback() }()
	ltx := lookupTx{tx: tx, wrap: func(err error) error { return p.lookupErr(ctx, r, pl, err) }}
	dropped, err := lookuprow.DropIfOrphan(ctx, ltx, r.lc.quoted[r.shard], r.value, r.owner, func(ctx context.Context) (bool, error) {
		return p.ownerHolds(ctx, m, r.lc, r.owner, r.value)
	})
	if err != nil || !dropped {
		return err
	}
	return tx.Commit()
}

// lookupTx is a lookup shard's transaction as lookuprow runs in it, its
// errors wrapped as lookupErr does.
type lookupTx struct {
	tx   *sql.Tx
	wrap func(error) error
}

func (t lookupTx) LockOwner(ctx context.Context, q string, value any) (int64, bool, error) {
	var owner int64
	err := t.tx.QueryRowContext(ctx, q, value).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, t.wrap(err)
	}
	return owner, true, nil
}

func (t lookupTx) Exec(ctx context.Context, q string, args ...any) error {
	if _, err := t.tx.ExecContext(ctx, q, args...); err != nil {
		return t.wrap(err)
	}
	return nil
}
