package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/adminconn"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/twophase"
	"github.com/shardkit/shardkit/router"
)

// Defaults of Config.
const (
	DefaultInterval      = 10 * time.Second
	DefaultAbortAfter    = time.Minute
	DefaultKeepDecisions = 10 * time.Minute
)

// Servers is what the resolver needs of the shard map: the servers and
// their DSNs. *router.Router satisfies it.
type Servers interface {
	Snapshot() *router.Snapshot
}

// Config configures a Resolver. Only Servers is required.
type Config struct {
	// Servers lists the shard servers (a *router.Router).
	Servers Servers
	// Databases are the other databases atomic transactions write, by a
	// name for reports: the application's default connection. A database
	// missing here keeps its prepared parts, which a pass does not see.
	// A pass deletes decision rows only when Databases names at least one
	// database or ServersOnly is set: a part on a database it cannot see
	// may still need its decision, and without the row it cannot be
	// committed.
	Databases map[string]string
	// ServersOnly says that atomic transactions write only the shard
	// servers (no statement on the default connection), so that a pass
	// without Databases sees every part and may delete the decision rows
	// none of them needs. Without it, or Databases, rows are kept
	// (Report.DecisionsKept).
	ServersOnly bool
	// Interval is the time between Run's passes. Zero means
	// DefaultInterval.
	Interval time.Duration
	// AbortAfter is how old a prepared part must be before it is rolled
	// back when its coordinator no longer knows its transaction and holds
	// no decision row. Zero means DefaultAbortAfter.
	AbortAfter time.Duration
	// KeepDecisions is how long a decision row is kept at least; older
	// rows go once no database holds a prepared part of them. Zero means
	// DefaultKeepDecisions; negative means no wait.
	KeepDecisions time.Duration
	// Logger receives what each pass does. Nil means slog.Default().
	Logger *slog.Logger
}

// InDoubt is a prepared part a pass left in place.
type InDoubt struct {
	GID      string
	Database string        // the server's name, or the name in Config.Databases
	Age      time.Duration // since PREPARE TRANSACTION
	Reason   string
}

// Report is what one pass did and left.
type Report struct {
	At               time.Time
	Committed        int // prepared parts committed
	RolledBack       int // prepared parts rolled back
	DecisionsDeleted int
	// DecisionsKept counts decision rows no part the pass saw needs, kept
	// because a database it cannot see may hold a part that does (see
	// Config.ServersOnly).
	DecisionsKept int
	InDoubt       []InDoubt // oldest first
	Errors        []error   // databases that could not be read, parts that could not be finished
}

// Oldest returns the age of the oldest part left in doubt, or 0.
func (r Report) Oldest() time.Duration {
	if len(r.InDoubt) == 0 {
		return 0
	}
	return r.InDoubt[0].Age
}

// Resolver finishes prepared parts of atomic transactions. Its methods
// are safe for concurrent use.
type Resolver struct {
	cfg  Config
	mu   sync.Mutex
	last Report
}

// New returns a resolver.
func New(cfg Config) *Resolver {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.AbortAfter <= 0 {
		cfg.AbortAfter = DefaultAbortAfter
	}
	if cfg.KeepDecisions == 0 {
		cfg.KeepDecisions = DefaultKeepDecisions
	}
	if cfg.KeepDecisions < 0 {
		cfg.KeepDecisions = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Resolver{cfg: cfg}
}

// ErrNoServers reports a Config without Servers. Pass the router (a
// *router.Router) as Config.Servers.
var ErrNoServers = errors.New("resolver: Config.Servers is nil; pass the router")

// Run runs a pass every Interval until ctx ends, and returns ctx's error.
// A pass's failures are logged and kept in Last; they do not stop Run.
func (r *Resolver) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("shardkit resolver: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Last returns the report of the latest pass.
func (r *Resolver) Last() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Statements of a pass.
const (
	sqlPrepared = `SELECT gid, extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts
WHERE database = current_database() AND gid LIKE 'shardkit:%' ORDER BY prepared`
	sqlOutcome = `SELECT coalesce(pg_xact_status($1::text::xid8), ''),
       EXISTS (SELECT 1 FROM shardkit.tx_decisions WHERE gid = $2)`
	sqlOldDecisions  = `SELECT gid FROM shardkit.tx_decisions WHERE at < now() - make_interval(secs => $1)`
	sqlDropDecisions = `DELETE FROM shardkit.tx_decisions WHERE gid = ANY($1)`
)

// connectTimeout bounds each connection a pass opens, so that one
// unreachable server does not hold up the others' parts.
const connectTimeout = 5 * time.Second

// database is one database a pass reads.
type database struct {
	name   string
	server bool // a shard server (may coordinate)
	conn   *pgx.Conn
	parts  []part
}

type part struct {
	gid twophase.GID
	raw string
	age time.Duration
}

// Pass finds every prepared part once and commits, rolls back or leaves
// each. Its error reports a pass that could not start; failures on one
// database are in the report, and the others are still finished.
func (r *Resolver) Pass(ctx context.Context) (Report, error) { return r.pass(ctx, true) }

// Survey reports every prepared part as in doubt, with what a pass would
// do with it, and changes nothing (shardctl status).
func (r *Resolver) Survey(ctx context.Context) (Report, error) { return r.pass(ctx, false) }

func (r *Resolver) pass(ctx context.Context, act bool) (Report, error) {
	if r.cfg.Servers == nil {
		return Report{}, ErrNoServers
	}
	rep := Report{At: time.Now()}
	dbs := r.connect(ctx, &rep)
	defer func() {
		for _, d := range dbs {
			_ = d.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	complete := len(rep.Errors) == 0 && act
	// Only a pass that sees every database a part may be on knows that a
	// decision has no part left.
	seesAll := len(r.cfg.Databases) > 0 || r.cfg.ServersOnly
	// Decision rows are read before the prepared parts: a decision is
	// committed only after all its parts prepared, so a row read now whose
	// decision has no part in the listing below has none anywhere.
	old := map[string][]string{} // server → decision IDs old enough to go
	for _, d := range dbs {
		if !d.server {
			continue
		}
		ids, err := r.oldDecisions(ctx, d)
		if err != nil {
			complete = false
			rep.Errors = append(rep.Errors, err)
			continue
		}
		old[d.name] = ids
	}
	live := map[string]bool{} // decisions with a part in the listing
	for _, d := range dbs {
		if err := r.list(ctx, d); err != nil {
			complete = false
			rep.Errors = append(rep.Errors, err)
			continue
		}
		for _, p := range d.parts {
			live[p.gid.Decision.String()] = true
		}
	}
	byName := map[string]*database{}
	for _, d := range dbs {
		byName[d.name] = d
	}
	outcomes := map[string]outcome{}
	for _, d := range dbs {
		for _, p := range d.parts {
			key := p.gid.Decision.String()
			o, ok := outcomes[key]
			if !ok {
				o = r.outcome(ctx, byName, p.gid.Decision)
				outcomes[key] = o
			}
			r.finish(ctx, d, p, o, act, &rep)
		}
	}
	if complete {
		for server, ids := range old {
			var gone []string
			for _, id := range ids {
				if !live[id] {
					gone = append(gone, id)
				}
			}
			if len(gone) == 0 {
				continue
			}
			if !seesAll {
				rep.DecisionsKept += len(gone)
				continue
			}
			tag, err := byName[server].conn.Exec(ctx, sqlDropDecisions, gone)
			if err != nil {
				rep.Errors = append(rep.Errors, fmt.Errorf("server %s: delete decision rows: %w", server, err))
				continue
			}
			rep.DecisionsDeleted += int(tag.RowsAffected())
		}
	}
	sort.Slice(rep.InDoubt, func(i, j int) bool { return rep.InDoubt[i].Age > rep.InDoubt[j].Age })
	if act {
		r.mu.Lock()
		r.last = rep
		r.mu.Unlock()
	}
	return rep, nil
}

// connect opens one connection per server and database.
func (r *Resolver) connect(ctx context.Context, rep *Report) []*database {
	type target struct {
		name, dsn string
		server    bool
		srv       router.Server
	}
	var ts []target
	for _, s := range r.cfg.Servers.Snapshot().Servers() {
		// Direct where the snapshot has the admin DSN (an operator's
		// resolver); else the application's DSN, whose role may finish
		// the transactions it prepared (COMMIT PREPARED needs the role
		// that prepared or a superuser).
		dsn := s.Admin()
		if dsn == "" {
			dsn = s.DSN
		}
		ts = append(ts, target{s.Name, dsn, true, s})
	}
	names := make([]string, 0, len(r.cfg.Databases))
	for n := range r.cfg.Databases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ts = append(ts, target{name: n, dsn: r.cfg.Databases[n]})
	}
	var out []*database
	for _, t := range ts {
		// A server's connection reaches only its recorded primary: an old
		// primary back after a failover may hold prepared parts and
		// decision rows of its lost history, and finishing them there
		// would finish nothing the new primary holds.
		var cfg *pgx.ConnConfig
		var err error
		if t.server {
			cfg, err = adminconn.Config(t.srv, t.dsn)
		} else if cfg, err = pgx.ParseConfig(t.dsn); err != nil {
			err = fmt.Errorf("bad DSN: %w", pgdsn.Scrub(err))
		}
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: %w", t.name, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, connectTimeout)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("%s: connect: %w", t.name, err))
			continue
		}
		out = append(out, &database{name: t.name, server: t.server, conn: conn})
	}
	return out
}

func (r *Resolver) oldDecisions(ctx context.Context, d *database) ([]string, error) {
	rows, err := d.conn.Query(ctx, sqlOldDecisions, r.cfg.KeepDecisions.Seconds())
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42P01" {
			return nil, nil // not migrated yet: it coordinated nothing
		}
		return nil, fmt.Errorf("server %s: read decision rows: %w", d.name, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("server %s: read decision rows: %w", d.name, err)
	}
	return ids, nil
}

func (r *Resolver) list(ctx context.Context, d *database) error {
	rows, err := d.conn.Query(ctx, sqlPrepared)
	if err != nil {
		return fmt.Errorf("%s: list prepared transactions: %w", d.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var gid string
		var age float64
		if err := rows.Scan(&gid, &age); err != nil {
			return err
		}
		g, err := twophase.Parse(gid)
		if err != nil {
			continue // another shardkit version's, or not shardkit's: left alone
		}
		// now() is the start of the pass's transaction: a part
		// prepared since shows a negative age.
		d.parts = append(d.parts, part{gid: g, raw: gid, age: max(time.Duration(age*float64(time.Second)), 0)})
	}
	return rows.Err()
}

// outcome is what a decision's coordinator says.
type outcome struct {
	status   string // committed, aborted, in progress, or "" (unknown)
	recorded bool   // the decision row exists
	err      error  // the coordinator could not be asked
}

func (r *Resolver) outcome(ctx context.Context, byName map[string]*database, d twophase.Decision) outcome {
	c, ok := byName[d.Coordinator]
	if !ok || !c.server {
		return outcome{err: fmt.Errorf("coordinator server %s is not reachable or not in the shard map", d.Coordinator)}
	}
	var o outcome
	err := c.conn.QueryRow(ctx, sqlOutcome, strconv.FormatUint(d.XID, 10), d.String()).Scan(&o.status, &o.recorded)
	if err != nil {
		return outcome{err: fmt.Errorf("ask coordinator %s: %w", d.Coordinator, err)}
	}
	return o
}

// finish commits, rolls back or leaves one part by its decision's outcome.
func (r *Resolver) finish(ctx context.Context, d *database, p part, o outcome, act bool, rep *Report) {
	leave := func(reason string) {
		rep.InDoubt = append(rep.InDoubt, InDoubt{GID: p.raw, Database: d.name, Age: p.age, Reason: reason})
	}
	var verb string
	switch {
	case o.err != nil:
		leave(o.err.Error())
		return
	case o.status == "committed" && o.recorded:
		verb = "COMMIT PREPARED "
	case o.status == "committed":
		// The row is read in a snapshot taken before the status: a
		// decision committing in between shows as this. Look again.
		leave("committed, decision row not seen yet")
		return
	case o.status == "aborted":
		verb = "ROLLBACK PREPARED "
	case o.status == "in progress":
		leave("coordinator's transaction in progress")
		return
	case o.recorded:
		verb = "COMMIT PREPARED "
	case p.age >= r.cfg.AbortAfter:
		verb = "ROLLBACK PREPARED "
	default:
		leave("coordinator's transaction unknown and no decision row; rolled back once older than AbortAfter")
		return
	}
	if !act {
		leave("a pass would run " + verb + "on it")
		return
	}
	_, err := d.conn.Exec(ctx, verb+p.gid.Literal())
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42704":
		return // finished by its own process or another resolver meanwhile
	case err != nil:
		rep.Errors = append(rep.Errors, fmt.Errorf("%s: %s%s: %w", d.name, verb, p.raw, err))
		leave(err.Error())
		return
	}
	if verb == "COMMIT PREPARED " {
		rep.Committed++
		r.cfg.Logger.Info("shardkit resolver: committed a prepared part", "gid", p.raw, "database", d.name, "age", p.age)
	} else {
		rep.RolledBack++
		r.cfg.Logger.Info("shardkit resolver: rolled back a prepared part", "gid", p.raw, "database", d.name, "age", p.age)
	}
}
