package rebalance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// Config configures a Mover. Only Catalog is required.
type Config struct {
	// Catalog holds the shard map and the move journal.
	Catalog *catalog.Catalog
	// ShardSQL is the application's per-shard SQL (migrations.ReadVersions),
	// used to create the shard's schema on the target. nil means the files
	// recorded in the catalog by migrations.Provision and Migrate.
	ShardSQL fs.FS
	// CutoverTimeout bounds the wait for the target to apply the source's
	// final LSN while writes are fenced; past it the cutover is aborted
	// (barrier removed, shard unfenced). 0 means 10s.
	CutoverTimeout time.Duration
	// FenceLease bounds how long a cutover's fence can keep the shard from
	// taking writes if its mover dies: the write barrier refuses writes
	// only until FenceLease after it was installed, on the serving
	// server's own clock, and the cutover flips the map only after
	// sealing the barrier before that deadline (else ErrCutoverAborted, and
	// the move stays resumable). A fenced shard whose lease lapsed is
	// unfenced (or, if sealed, flipped) by Mover.WatchFences. It should
	// exceed CutoverTimeout, which bounds the wait for the final LSN inside
	// the lease; plugin writes to a fenced shard wait plugin.Config.FenceWait
	// (2s by default) and then fail with a retriable error, so a dead
	// mover costs writers at most FenceLease plus the watcher's interval
	// of such errors. 0 means CutoverTimeout + 5s (15s by default).
	FenceLease time.Duration
	// CatchUpBytes is the replication lag under which the catch-up step
	// ends and the cutover prepares. 0 means 1 MiB.
	CatchUpBytes int64
	// CutoverLag is the lag gate in front of the fence: the shard is fenced
	// only once a catalog round trip and the replica's confirmation of a
	// position written just then on the serving side took at most
	// CutoverLag together, so the same steps inside the fenced window are
	// as quick. 0 means 15ms.
	CutoverLag time.Duration
	// BarrierWait bounds how long the barrier waits, with the shard
	// fenced, for write transactions still running on it; past it the
	// attempt is unfenced and tried again after the lag gate (gh-ost and
	// Vitess retry their cut-over locks the same way). 0 means 40ms.
	BarrierWait time.Duration
	// GateTimeout bounds the wait for the lag gate, past which the move
	// stops with ErrCutoverAborted (nothing fenced; Mover.Resume tries again),
	// and the short barrier attempts, past which one last attempt waits
	// up to 5s for running writes. 0 means 2 minutes.
	GateTimeout time.Duration
	// DrainBound is the longest fenced window the move accepts for a
	// shard written faster than the target applies (a hot shard, which
	// never passes the CutoverLag gate): once the lag would drain within
	// DrainBound at the measured apply rate (the fence stops the writes),
	// the move fences. It stays under plugin.Config.FenceWait (2s by
	// default), so fenced writers wait rather than fail. 0 means 1s;
	// capped at half of CutoverTimeout.
	DrainBound time.Duration
	// CatchUpTimeout bounds how long the catch-up and the lag gate watch a
	// target that applies more slowly than the shard is written, with a
	// lag that would not drain within DrainBound; past it the move stops
	// with ErrCutoverAborted, its message carrying the write and apply
	// rates, with nothing fenced and the move resumable. 0 means 1 minute.
	CatchUpTimeout time.Duration
	// StepTimeout bounds every step of a move, and Verify and Complete;
	// past it the step fails (ErrStopped) naming what it waited for.
	// 0 means 15 minutes.
	StepTimeout time.Duration
	// SequenceMargin is added to the source's sequence values when they are
	// carried to the target, to cover values drawn by writes that the
	// barrier then refused. 0 means 1024.
	SequenceMargin int64
	// CopyWorkers bounds the parallelism of a move's copy (tables copied
	// at once, each over one source and one target connection) and of its
	// index build (indexes built at once on the target). 0 means 4.
	CopyWorkers int
	// IndexMemory is the maintenance_work_mem, in bytes, of each session
	// that builds the target's keys and indexes after the copy (the
	// server's own setting is kept when it is larger). 0 means 256 MiB.
	IndexMemory int64
	// Progress, if set, receives progress of the copy, the catch-up and
	// the lag gate.
	// It is called from the mover's goroutine; keep it quick.
	Progress func(Progress)
	// hook, if set, is called before (done false) and after (done true)
	// each step, with the journal already updated. Tests (in this
	// package) use it to kill the mover at every step.
	hook func(m Move, s Step, done bool)
	// Logger receives one line per step. nil means slog.Default().
	Logger *slog.Logger
}

// Progress is a progress report of one move's phase.
type Progress struct {
	MoveID      int64
	Shard       int
	Phase       string // "copy" (bytes of the source's tables, in proportion to the rows copied), "catchup" (bytes of lag), "gate" (the lag gate: rates only)
	Done, Total int64
	Rows        int64 // rows copied so far (copy phase)
	// WriteRate and ApplyRate are the source's WAL write rate and the
	// rate the target confirms it, in bytes per second, and Lag the bytes
	// between them (catchup and gate phases; 0 until measured).
	WriteRate, ApplyRate float64
	Lag                  int64
}

// Mover moves logical shards between servers. It is safe for concurrent
// use by moves of different shards.
type Mover struct {
	cfg Config
	j   journal
	log *slog.Logger

	mu     sync.Mutex
	pools  map[serverDSN]*pgxpool.Pool
	phases *phaseGate // cutovers apart from each other and from copies and index builds
}

// New returns a Mover with cfg's defaults filled in.
func New(cfg Config) (*Mover, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("shardkit: rebalance.Config.Catalog is required")
	}
	if cfg.CutoverTimeout <= 0 {
		cfg.CutoverTimeout = 10 * time.Second
	}
	if cfg.FenceLease <= 0 {
		cfg.FenceLease = cfg.CutoverTimeout + 5*time.Second
	}
	if cfg.CatchUpBytes <= 0 {
		cfg.CatchUpBytes = 1 << 20
	}
	if cfg.CutoverLag <= 0 {
		cfg.CutoverLag = 15 * time.Millisecond
	}
	if cfg.BarrierWait <= 0 {
		cfg.BarrierWait = 40 * time.Millisecond
	}
	if cfg.GateTimeout <= 0 {
		cfg.GateTimeout = 2 * time.Minute
	}
	if cfg.DrainBound <= 0 {
		cfg.DrainBound = time.Second
	}
	cfg.DrainBound = min(cfg.DrainBound, cfg.CutoverTimeout/2)
	if cfg.CatchUpTimeout <= 0 {
		cfg.CatchUpTimeout = time.Minute
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 15 * time.Minute
	}
	if cfg.SequenceMargin <= 0 {
		cfg.SequenceMargin = 1024
	}
	if cfg.CopyWorkers <= 0 {
		cfg.CopyWorkers = 4
	}
	if cfg.IndexMemory <= 0 {
		cfg.IndexMemory = 256 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Mover{cfg: cfg, j: journal{cfg.Catalog.Moves()}, log: log, pools: map[serverDSN]*pgxpool.Pool{},
		phases: newPhaseGate()}, nil
}

// Close closes the Mover's connections to the servers.
func (mv *Mover) Close() {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	for _, p := range mv.pools {
		p.Close()
	}
	mv.pools = map[serverDSN]*pgxpool.Pool{}
}

// serverDSN keys the Mover's pools: a server whose admin DSN changed (a
// rotated password) or whose recorded primary changed (a failover) gets a
// new pool at its next use, while moves under way finish on the one they
// hold; Close closes both.
type serverDSN struct {
	name, dsn string
	primary   router.Primary
}

// server returns a pool for a server and its DSN: the admin DSN, since a
// move's sessions set session state and its subscriptions replicate, which
// a transaction pooler in front of the application DSN cannot carry. The
// pool uses only the host the catalog records as the server's primary
// (router.Fence), when one is recorded: an old primary back after a
// failover is writable, and has not the rows written since.
func (mv *Mover) server(ctx context.Context, snap *router.Snapshot, name string) (*pgxpool.Pool, string, error) {
	srv, ok := snap.Server(name)
	if !ok {
		return nil, "", fmt.Errorf("shardkit: server %q: %w", name, router.ErrUnknownServer)
	}
	mv.mu.Lock()
	defer mv.mu.Unlock()
	key := serverDSN{name, srv.Admin(), srv.Primary}
	if p, ok := mv.pools[key]; ok {
		return p, srv.Admin(), nil
	}
	cfg, err := pgxpool.ParseConfig(srv.Admin())
	if err != nil {
		return nil, "", fmt.Errorf("shardkit: server %q DSN: %w", name, pgdsn.Scrub(err))
	}
	router.Fence(&cfg.ConnConfig.Config, name, srv.Primary) // only the recorded primary, as the plugin's pools (adminconn)
	// A copy holds two connections per worker, on different servers; a
	// server can be one move's source and another's target at once.
	cfg.MaxConns = int32(max(8, 2*mv.cfg.CopyWorkers+4))
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("shardkit: connect to server %q: %w", name, err)
	}
	mv.pools[key] = p
	return p, srv.Admin(), nil
}

// moveCtx is what the steps of one move share.
type moveCtx struct {
	m        *Move
	steps    []Step
	snap     *router.Snapshot
	layout   idgen.Layout
	schema   string
	n        names
	src, tgt *pgxpool.Pool
	srcDSN   string
	tgtDSN   string
	// srcAt and tgtAt are the hosts of each DSN that its pool reached
	// when the move (or its resume) began: the server's primary. The
	// move's replication connections and subscriptions name that host
	// only (nil: the DSN as it is), so that a slot made there is read
	// there, and a resume after a failover repoints them (repoint).
	srcAt, tgtAt *pgdsn.HostPort
	role         string // the application's group role (catalog.Config.AppRole)
}

func (mv *Mover) prepare(ctx context.Context, m *Move) (*moveCtx, error) {
	snap, err := mv.cfg.Catalog.Operator().Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := mv.loadShardSQL(ctx); err != nil {
		return nil, err
	}
	n, err := moveNames(*m)
	if err != nil {
		return nil, err
	}
	src, srcDSN, err := mv.server(ctx, snap, m.Source)
	if err != nil {
		return nil, err
	}
	tgt, tgtDSN, err := mv.server(ctx, snap, m.Target)
	if err != nil {
		return nil, err
	}
	cfg, err := mv.cfg.Catalog.Config(ctx)
	if err != nil {
		return nil, err
	}
	steps := onlineSteps
	if m.Offline {
		steps = offlineSteps
	}
	srcAt, err := reached(ctx, src, srcDSN, m.Source)
	if err != nil {
		return nil, err
	}
	tgtAt, err := reached(ctx, tgt, tgtDSN, m.Target)
	if err != nil {
		return nil, err
	}
	return &moveCtx{m: m, steps: steps, snap: snap, layout: snap.Layout, schema: router.SchemaName(m.Shard),
		n: n, src: src, tgt: tgt, srcDSN: srcDSN, tgtDSN: tgtDSN, srcAt: srcAt, tgtAt: tgtAt, role: cfg.AppRole}, nil
}

// reached returns the host of dsn that a connection of the server's pool
// reaches now (nil for a DSN of one host, or a host HostAt cannot tell).
// The pool's idle connections are pinged first and the dead ones closed:
// after a failover they are connections to a host that is gone, and a
// resume would fail on the first of them it took.
func reached(ctx context.Context, p *pgxpool.Pool, dsn, server string) (*pgdsn.HostPort, error) {
	for _, c := range p.AcquireAllIdle(ctx) {
		if err := c.Ping(ctx); err != nil {
			_ = c.Conn().Close(ctx) // released closed, the pool destroys it
		}
		c.Release()
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shardkit: server %q DSN: %w", server, pgdsn.Scrub(err))
	}
	hosts := pgdsn.Hosts(cfg)
	if len(hosts) < 2 {
		return nil, nil
	}
	conn, err := p.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("shardkit: connect to server %q: %w", server, err)
	}
	defer conn.Release()
	if h, ok := pgdsn.HostAt(hosts, conn.Conn().PgConn().Conn().RemoteAddr()); ok {
		return &h, nil
	}
	return nil, nil
}

// conninfo is dsn in libpq's form for a server's connections to another
// (a subscription), naming the host at when it is known.
func conninfo(dsn string, at *pgdsn.HostPort) (string, error) {
	if at == nil {
		return pgdsn.Libpq(dsn)
	}
	return pgdsn.LibpqAt(dsn, *at)
}

// pinned is dsn's connection settings for the host at (nil: as they are),
// with its other hosts left out.
func pinned(cfg *pgconn.Config, at *pgdsn.HostPort) *pgconn.Config {
	pc := cfg.Copy()
	if at == nil {
		return pc
	}
	var fallbacks []*pgconn.FallbackConfig
	for _, f := range pc.Fallbacks {
		if f.Host == at.Host && f.Port == at.Port {
			fallbacks = append(fallbacks, f) // sslmode=prefer's plain retry of the same host
		}
	}
	if pc.Host != at.Host || pc.Port != at.Port {
		// The first host is another one: at's first try takes its TLS
		// settings from its first fallback.
		if len(fallbacks) == 0 {
			pc.Host, pc.Port = at.Host, at.Port
		} else {
			pc.Host, pc.Port, pc.TLSConfig = fallbacks[0].Host, fallbacks[0].Port, fallbacks[0].TLSConfig
			fallbacks = fallbacks[1:]
		}
	}
	pc.Fallbacks = fallbacks
	return pc
}

func (mv *Mover) loadShardSQL(ctx context.Context) error {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if mv.cfg.ShardSQL != nil {
		return nil
	}
	fsys, err := shardschema.CatalogSQL(ctx, mv.cfg.Catalog)
	if err != nil {
		return err
	}
	mv.cfg.ShardSQL = fsys
	return nil
}

// next returns the step after s in the move's order, "" if none.
func (mc *moveCtx) next(s Step) Step {
	if i := stepIndex(mc.steps, s); i >= 0 && i+1 < len(mc.steps) {
		return mc.steps[i+1]
	}
	return ""
}

// done reports whether step s of the move has finished.
func (mc *moveCtx) done(s Step) bool {
	return stepIndex(mc.steps, mc.m.Step) >= stepIndex(mc.steps, s)
}

// step runs fn as step s unless the journal says it finished, recording it
// before and after. fn must be idempotent: a killed mover runs it again.
func (mv *Mover) step(ctx context.Context, mc *moveCtx, s Step, fn func(ctx context.Context) error) error {
	if stepIndex(mc.steps, s) >= 0 && mc.done(s) {
		return nil
	}
	return mv.record(ctx, mc.m, s, mc.next(s), fn)
}

// record runs fn as step s, with the journal updated before and after. The
// update after also records next (if any) as under way, and the values fn
// left in m (LSNs, sequence value, fenced time), so that a step costs one
// catalog round trip.
func (mv *Mover) record(ctx context.Context, m *Move, s, next Step, fn func(ctx context.Context) error) error {
	if m.Doing != s {
		if err := mv.j.beginStep(ctx, m.ID, s); err != nil {
			return err
		}
		m.Doing = s
	}
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, s, false)
	}
	start := time.Now()
	if err := mv.bounded(ctx, "step "+string(s), fn); err != nil {
		return mv.stepFailed(ctx, m, s, err)
	}
	if err := mv.j.finishStep(ctx, m, s, next); err != nil {
		return err
	}
	m.Step, m.Doing, m.Error = s, next, ""
	mv.log.Info("shardkit: move step", "move", m.ID, "shard", m.Shard, "step", s, "took", time.Since(start).Round(time.Microsecond))
	if mv.cfg.hook != nil {
		mv.cfg.hook(*m, s, true)
	}
	return nil
}

// stepFailed records err as the failure of step s (even if ctx was
// cancelled) and returns it as a *MoveError.
func (mv *Mover) stepFailed(ctx context.Context, m *Move, s Step, err error) error {
	var me *MoveError
	if errors.As(err, &me) {
		return err
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = mv.j.failStep(bg, m.ID, err.Error())
	cancel()
	m.Error = err.Error()
	mv.log.Warn("shardkit: move step failed", "move", m.ID, "shard", m.Shard, "step", s, "err", err)
	return stoppedAt(m, s, err)
}

// stoppedAt is the *MoveError of move m stopped at step s by err: of err's
// Kind, ErrStopped when it has none.
func stoppedAt(m *Move, s Step, err error) *MoveError {
	k := kindOf(err)
	if k == nil {
		k = ErrStopped
	}
	return &MoveError{Kind: k, ID: m.ID, Shard: m.Shard, Source: m.Source, Target: m.Target, Step: s, Err: err}
}

// bounded runs fn with Config.StepTimeout as its deadline. Past it the
// error is errStepTimeout, wrapping fn's, which says what fn waited for.
func (mv *Mover) bounded(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, mv.cfg.StepTimeout)
	defer cancel()
	err := fn(sctx)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		return &timeoutError{What: what, After: mv.cfg.StepTimeout, Err: err}
	}
	return err
}

func (mv *Mover) setState(ctx context.Context, m *Move, st State) error {
	if err := mv.j.setState(ctx, m.ID, st); err != nil {
		return err
	}
	m.State = st
	return nil
}

// MoveOptions are the options of one move.
type MoveOptions struct {
	// Offline fences the shard for the whole copy (COPY table by table)
	// instead of using logical replication; the move is not reversible.
	// The zero value moves online, and fails with ErrNotLogical when a
	// server's wal_level is not logical.
	Offline bool
}

// Move moves a logical shard to the target server and returns the journal
// row. It runs Preflight first and, when a check fails, returns its
// *MoveError having changed nothing. Objects of the shard's schema
// made outside its per-shard SQL are created on the target too (tables
// with their rows). An online move ends reversible: the shard is served by the target,
// the source is kept current by reverse replication until Complete (or
// Rollback). An offline move ends completed.
func (mv *Mover) Move(ctx context.Context, shard int, target string, opts MoveOptions) (_ Move, err error) {
	defer asMoveErrorTo(&err, shard, target)
	// The preflight changes nothing; a move it refuses leaves no journal
	// row, no map change and nothing on either server.
	r, err := mv.Preflight(ctx, shard, target, opts)
	if err != nil {
		return Move{}, err
	}
	m, err := mv.j.create(ctx, shard, r.Source, target, r.Offline)
	if err != nil {
		return Move{}, err
	}
	mv.log.Info("shardkit: move started", "move", m.ID, "shard", shard, "from", m.Source, "to", target, "mode", modeName(r.Offline),
		"carried", len(r.Carried))
	return mv.drive(ctx, &m)
}

// Resume continues the unfinished move of a shard from its last recorded
// step: forward for a running move, backward for one rolling back.
func (mv *Mover) Resume(ctx context.Context, shard int) (_ Move, err error) {
	defer asMoveError(&err, shard)
	m, err := mv.j.open(ctx, shard)
	if err != nil {
		return Move{}, err
	}
	switch m.State {
	case StateRunning:
		return mv.drive(ctx, &m)
	case StateRollingBack:
		return mv.rollback(ctx, &m)
	default:
		return m, nil // reversible: nothing to resume; complete or roll back
	}
}

// drive runs a move forward from its journal position.
func (mv *Mover) drive(ctx context.Context, m *Move) (Move, error) {
	mc, err := mv.prepare(ctx, m)
	if err != nil {
		return *m, err
	}
	if err := mv.acrossFailover(ctx, mc); err != nil {
		return *m, err
	}
	if m.Offline {
		err = mv.offline(ctx, mc)
	} else {
		err = mv.online(ctx, mc)
	}
	return *m, err
}
