package rebalance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// The fence of a cutover is a lease held on the serving side's own clock.
// The write barrier's trigger function (barrierName) goes through these
// bodies, each marked with a comment that names its state and the attempt
// (token) that wrote it:
//
//	pass <token>                installed before the fence: every write goes through
//	lease <token> until <epoch> the barrier: writes are refused until the
//	                            server's clock reaches <epoch>, then go through again
//	sealed <token>              the cutover checked, under the tables' locks, that its
//	                            lease had not lapsed: writes are refused for good
//	released                    the fence was given up: every write goes through
//
// Only a sealed barrier lets the map flip, and nothing but the flip's own
// cleanup removes a sealed one. The seal and any write let through after
// the deadline take conflicting locks on the same tables of the same
// server, and the seal checks that server's clock: either the seal commits
// first (later writes are refused), or the write does and the seal then
// finds the lease lapsed. A releaser (Mover.WatchFences) replaces a lapsed
// lease with released, so a seal that comes later fails whatever the
// clocks say.
const (
	// fenceLapsedSQLState is what the barrier and the seal raise when
	// their attempt's body is gone or its lease lapsed.
	fenceLapsedSQLState = "SK003"

	sqlFenceBodyPass = `CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    -- shardkit:pass {token}
    RETURN NULL;
END $fn$`
	sqlFenceBodyReleased = `CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    -- shardkit:released
    RETURN NULL;
END $fn$`
	sqlFenceBodySealed = `CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    -- shardkit:sealed {token}
    RAISE EXCEPTION 'shardkit: shard schema % has moved to another server; reload the shard map and retry there', TG_TABLE_SCHEMA
        USING ERRCODE = '` + router.FenceSQLState + `';
END $fn$`

	// sqlFencePrepCheck refuses to replace a sealed barrier before a new
	// attempt (it runs under the tables' locks): a sealed barrier's shard
	// is flipped by Mover.Resume or the fence watcher, never reopened.
	sqlFencePrepCheck = `DO $chk$
BEGIN
    IF strpos(coalesce((SELECT prosrc FROM pg_proc WHERE oid = to_regproc({fnlit})), ''), 'shardkit:sealed') > 0 THEN
        RAISE EXCEPTION 'shardkit: the write barrier of % is sealed by a cutover that did not flip the map; resume the move', {schemalit}
            USING ERRCODE = '` + fenceLapsedSQLState + `';
    END IF;
END $chk$`

	// sqlFenceLease replaces this attempt's pass body with the lease,
	// whose deadline is the server's clock plus {lease} seconds.
	sqlFenceLease = `DO $lease$
BEGIN
    IF strpos(coalesce((SELECT prosrc FROM pg_proc WHERE oid = to_regproc({fnlit})), ''), 'shardkit:pass {token}') = 0 THEN
        RAISE EXCEPTION 'shardkit: the write barrier of % was released before this cutover installed it (its fence lease lapsed)', {schemalit}
            USING ERRCODE = '` + fenceLapsedSQLState + `';
    END IF;
    EXECUTE format($body$CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    -- shardkit:lease {token} until %1$s
    IF extract(epoch FROM clock_timestamp()) < %1$s THEN
        RAISE EXCEPTION 'shardkit: shard schema %% is cutting over to another server; reload the shard map and retry', TG_TABLE_SCHEMA
            USING ERRCODE = '` + router.FenceSQLState + `';
    END IF;
    RETURN NULL;
END $fn$$body$, round(extract(epoch FROM clock_timestamp()) + {lease}, 6));
END $lease$`

	// sqlFenceSeal turns this attempt's lease into the sealed body if the
	// lease has not lapsed on the server's clock. It runs after the
	// tables' locks: a write let through after the deadline has committed
	// (or rolled back) by then.
	sqlFenceSeal = `DO $seal$
DECLARE
    deadline numeric := substring(coalesce((SELECT prosrc FROM pg_proc WHERE oid = to_regproc({fnlit})), '')
        FROM 'shardkit:lease {token} until ([0-9.]+)')::numeric;
    clock numeric := extract(epoch FROM clock_timestamp());
BEGIN
    IF deadline IS NULL THEN
        RAISE EXCEPTION 'shardkit: the write barrier of % was released before the cutover sealed it (its fence lease lapsed)', {schemalit}
            USING ERRCODE = '` + fenceLapsedSQLState + `';
    END IF;
    IF clock >= deadline THEN
        RAISE EXCEPTION 'shardkit: the fence lease of % lapsed % s ago, before the cutover sealed it', {schemalit}, round(clock - deadline, 3)
            USING ERRCODE = '` + fenceLapsedSQLState + `';
    END IF;
    EXECUTE $body$` + sqlFenceBodySealed + `$body$;
END $seal$`

	// sqlFenceBody reads the barrier function's body and whether a lease
	// in it still holds on the server's clock (seconds left, NULL if no lease).
	sqlFenceBody = `SELECT coalesce(src, ''),
	substring(src FROM 'shardkit:lease [0-9a-f]+ until ([0-9.]+)')::numeric - extract(epoch FROM clock_timestamp())
	FROM (SELECT (SELECT prosrc FROM pg_proc WHERE oid = to_regproc($1)) AS src) b`
)

// fenceSQL fills a template above for schema and token.
func fenceSQL(tmpl, schema, token string, lease time.Duration) string {
	fn := ident(schema, barrierName)
	return strings.NewReplacer("{fn}", fn, "{fnlit}", quoteLiteral(fn), "{schemalit}", quoteLiteral(schema),
		"{token}", token, "{lease}", fmt.Sprintf("%.6f", lease.Seconds())).Replace(tmpl)
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// newFenceToken names one attempt of a cutover in its barrier's bodies.
func newFenceToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fenceKind is the state of a barrier function's body.
type fenceKind string

const (
	fenceNone     fenceKind = ""         // no barrier function
	fencePass     fenceKind = "pass"     // prepared, writes go through
	fenceLease    fenceKind = "lease"    // refusing until a deadline
	fenceSealed   fenceKind = "sealed"   // refusing for good; the map may flip
	fenceReleased fenceKind = "released" // given up, writes go through
	fenceFixed    fenceKind = "fixed"    // an unconditional barrier without a lease (offline move)
)

var fenceMarker = regexp.MustCompile(`shardkit:(pass|lease|sealed|released)\b`)

// fenceBody is what a barrier function's body says.
type fenceBody struct {
	kind fenceKind
	left time.Duration // lease: time until its deadline on the server's clock (<= 0: lapsed)
}

func parseFenceBody(src string, left *float64) fenceBody {
	if src == "" {
		return fenceBody{kind: fenceNone}
	}
	mm := fenceMarker.FindStringSubmatch(src)
	if mm == nil {
		return fenceBody{kind: fenceFixed}
	}
	b := fenceBody{kind: fenceKind(mm[1])}
	if b.kind == fenceLease && left != nil {
		b.left = time.Duration(*left * float64(time.Second))
	}
	return b
}

// held reports a lease that has not lapsed.
func (b fenceBody) held() bool { return b.kind == fenceLease && b.left > 0 }

// runSeal runs a statement built by sealSQL on the serving side, in one
// round trip. A lapsed or released lease is errFenceLapsed.
func runSeal(ctx context.Context, conn *pgxpool.Conn, schema, sql string) error {
	results, err := conn.Conn().PgConn().Exec(ctx, sql).ReadAll()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == fenceLapsedSQLState {
		return fmt.Errorf("seal the write barrier on %s: %w: %s", schema, errFenceLapsed, pe.Message)
	}
	if err != nil {
		return fmt.Errorf("seal the write barrier on %s: %w", schema, err)
	}
	n := len(results)
	if n == 0 || len(results[n-1].Rows) != 1 || string(results[n-1].Rows[0][0]) != schema {
		return fmt.Errorf("seal the write barrier on %s: unexpected reply", schema)
	}
	return nil
}

// sealSQL builds the seal of schema's barrier for attempt token: the
// tables' locks, then sqlFenceSeal, in one implicit transaction committed
// synchronously (a seal lost in a crash would let the lease lapse after
// the flip).
func sealSQL(schema, token string, tables []string, lockWait time.Duration) string {
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = ident(schema, t)
	}
	return strings.Join([]string{
		fmt.Sprintf(sqlBarrierSettings, max(lockWait.Milliseconds(), 1), ident(schema)),
		"LOCK TABLE " + strings.Join(quoted, ", ") + " IN SHARE ROW EXCLUSIVE MODE",
		fenceSQL(sqlFenceSeal, schema, token, 0),
		"SELECT current_schema()::text",
	}, ";\n")
}

// releaseFence gives up the fence (the barrier's lease) of schema on p
// unless it is sealed (or, when !force, unless it is a lease that still
// holds or a barrier without a lease): under the tables' locks its body
// becomes released, and the application role gets the schema back (the
// barrier revoked it). It returns the body it found.
func releaseFence(ctx context.Context, p *pgxpool.Pool, schema string, force bool, role string) (fenceBody, error) {
	var b fenceBody
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		tables, err := listTables(ctx, tx, schema)
		if err != nil || len(tables) == 0 {
			return err
		}
		quoted := make([]string, len(tables))
		for i, t := range tables {
			quoted[i] = ident(schema, t)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'; SET LOCAL synchronous_commit = on; LOCK TABLE "+
			strings.Join(quoted, ", ")+" IN SHARE ROW EXCLUSIVE MODE", pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		var src string
		var left *float64
		if err := tx.QueryRow(ctx, sqlFenceBody, ident(schema, barrierName)).Scan(&src, &left); err != nil {
			return err
		}
		b = parseFenceBody(src, left)
		switch {
		case b.kind == fenceNone, b.kind == fenceSealed, b.kind == fenceReleased:
			return nil
		case !force && (b.held() || b.kind == fenceFixed):
			return nil
		}
		grant, err := homeSQL(ctx, tx, role, schema, true)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, joinSQL(fenceSQL(sqlFenceBodyReleased, schema, "", 0), grant), pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err != nil {
		return b, fmt.Errorf("release the write barrier on %s: %w", schema, err)
	}
	return b, nil
}

// settled is what settleFence did.
type settled int

const (
	settledHeld     settled = iota // the lease still holds (or the barrier has none): left alone
	settledReleased                // writes go through again; map unfenced, journal back
	settledFlipped                 // the barrier was sealed: the map flipped
)

func (s settled) String() string {
	return [...]string{"held", "released", "flipped"}[s]
}

// settleFence ends a cutover attempt that will not go on: its own abort,
// a resume inside the window (force: the attempt is given up), or the
// fence watcher for a lapsed lease (until: the fence_until it read, which
// must still be the catalog's for it to unfence). The serving side's
// barrier decides: sealed means the replica has everything and the map
// flips; otherwise the barrier is released first, then the map unfenced.
func (mv *Mover) settleFence(ctx context.Context, mc *moveCtx, p cutoverPlan, force bool, until *time.Time, note string) (settled, error) {
	m := mc.m
	b, err := releaseFence(ctx, p.from, mc.schema, force, mc.role)
	if err != nil {
		return settledHeld, err
	}
	cat := mv.j.s
	switch {
	case b.kind == fenceSealed:
		if p.removeOnTo {
			if err := removeBarrier(ctx, p.to, mc.schema); err != nil {
				return settledHeld, err
			}
		}
		if err := setHome(ctx, p.to, mc.role, mc.schema, true); err != nil {
			return settledHeld, err
		}
		if err := flipJournalled(ctx, cat, m, p.fromName, p.toName, p.flipped, mc.next(p.flipped)); err != nil {
			return settledHeld, err
		}
		m.Step, m.Doing, m.Error = p.flipped, mc.next(p.flipped), ""
		mv.log.Warn("shardkit: "+p.what+" sealed the barrier but did not flip the map; flipped", "move", m.ID, "shard", m.Shard, "to", p.toName)
		return settledFlipped, nil
	case !force && (b.held() || b.kind == fenceFixed):
		return settledHeld, nil
	}
	unfenced, err := unfenceJournalled(ctx, cat, m, p.fromName, p.abortState, p.abortStep, until, note)
	if err != nil {
		return settledHeld, err
	}
	if !unfenced && until != nil {
		return settledHeld, nil // fenced again, or flipped, since it was read
	}
	if !unfenced {
		// Not fenced (the attempt failed before its fence): the journal
		// goes back all the same.
		if err := mv.j.endStep(ctx, m.ID, p.abortStep); err != nil {
			return settledHeld, err
		}
	}
	m.Step, m.Doing = p.abortStep, ""
	if p.afterAbort != nil {
		if err := p.afterAbort(ctx); err != nil {
			return settledHeld, err
		}
	}
	return settledReleased, nil
}

// ReleaseLapsedFences ends the fences whose lease lapsed: shards fenced in
// the catalog past fence_until by an online move's cutover that did not
// flip (its mover was killed, or hangs). On the fenced server, under the
// tables' locks: a sealed barrier means the other side has every write,
// and the map flips; otherwise the barrier is released (a late seal then
// fails) and the shard unfenced, its move resumable. Offline moves hold
// their fence until resumed or rolled back. Safe to run at any time, from
// any number of processes, alongside live movers.
func (mv *Mover) ReleaseLapsedFences(ctx context.Context) ([]Fence, error) {
	ls, err := mv.j.s.LapsedFences(ctx)
	if err != nil {
		return nil, err
	}
	var out []Fence
	var errs []error
	for _, l := range ls {
		r, err := mv.releaseLapsed(ctx, l.Shard, l.Server, l.Until)
		r.Until, r.Left = l.Until, l.Left
		if err != nil {
			errs = append(errs, fmt.Errorf("shardkit: shard %d fenced on %s: %w", l.Shard, l.Server, err))
			continue
		}
		if r.Action != "" {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

func (mv *Mover) releaseLapsed(ctx context.Context, shard int, server string, until time.Time) (Fence, error) {
	m, err := mv.j.open(ctx, shard)
	if errors.Is(err, errNoMove) {
		return Fence{}, nil
	}
	if err != nil || m.Offline {
		return Fence{}, err
	}
	mc, err := mv.prepare(ctx, &m)
	if err != nil {
		return Fence{}, err
	}
	var p cutoverPlan
	switch m.State {
	case StateRunning:
		p = mv.forwardPlan(mc)
	case StateRollingBack:
		mc.steps = rollbackSteps
		p = mv.rollbackPlan(mc)
	default:
		return Fence{}, nil
	}
	if p.fromName != server {
		return Fence{}, nil
	}
	s, err := mv.settleFence(ctx, mc, p, false, &until, "fence lease lapsed; released by the fence watcher: resume or roll back the move")
	if err != nil {
		return Fence{}, err
	}
	if s != settledHeld { // held: the catalog's clock ran ahead of the server's
		mv.log.Warn("shardkit: fence lease lapsed", "move", m.ID, "shard", shard, "server", server, "action", s)
	}
	return Fence{Shard: shard, MoveID: m.ID, Server: server, Action: s.String()}, nil
}

// WatchFences runs ReleaseLapsedFences every interval (0 means 1s) until
// ctx ends, logging what it did and any error; it returns ctx's error. Run
// it in every service that uses shardkit (or `shardctl watch-fences`), so
// that a mover killed inside a cutover leaves the shard unwritable for at
// most Config.FenceLease plus interval.
func (mv *Mover) WatchFences(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := mv.ReleaseLapsedFences(ctx); err != nil && ctx.Err() == nil {
			mv.log.Warn("shardkit: release lapsed fences", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Fence is a shard fenced under a lease by an online move's cutover, as
// the catalog records it (Fences), or one whose lease lapsed and what
// Mover.ReleaseLapsedFences did with it.
type Fence struct {
	Shard  int
	Server string        // where the shard is fenced
	Until  time.Time     // when the lease lapses, on the catalog's clock
	Left   time.Duration // until then (negative: lapsed; the fence watcher ends it)
	MoveID int64         // the move that fenced it; 0 from Fences
	// Action is what ReleaseLapsedFences did: "released" (writes go
	// through on Server again, the map unfenced; Mover.Resume or
	// Mover.Rollback the move), "flipped" (the cutover had sealed its
	// barrier: the map now places the shard on the other server; resume
	// the move to finish it) or "held" (the server's own clock says the
	// lease holds yet). "" from Fences.
	Action string
}

// Fences returns the shards fenced under a lease now, by shard: what
// `shardctl status` shows next to the moves.
func Fences(ctx context.Context, cat *catalog.Catalog) ([]Fence, error) {
	fs, err := cat.Moves().Fences(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Fence, len(fs))
	for i, f := range fs {
		out[i] = Fence{Shard: f.Shard, Server: f.Server, Until: f.Until, Left: f.Left}
	}
	return out, nil
}
