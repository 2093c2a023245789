// Command demo is `make demo`: it starts a catalog and three PostgreSQL
// servers (internal/harness/pglocal), provisions 2000 logical shards, starts the
// photo service, drives it with the load generator, adds a fourth server
// and moves shards onto it while the load runs, then prints rows per
// server before and after, request errors and the longest write wait at
// cutover. The service runs as photos_app, a login of the application
// role the demo creates on every local cluster; provisioning and the moves
// run as the operator (the clusters' superuser).
//
// To use existing servers instead of local clusters, set
//
//	SHARDKIT_CATALOG=postgres://…/catalog   (the operator's)
//	SHARDKIT_APP_CATALOG=postgres://…/catalog   (optional: the service's, a login of the application role)
//	SHARDKIT_SERVERS=s1=postgres://…,s2=postgres://…,s3=postgres://…
//	SHARDKIT_ADMIN_SERVERS=s1=postgres://…,…   (optional: the operator's DSNs of those servers)
//	SHARDKIT_NEW_SERVER=s4=postgres://…   (optional: without it shards move between the servers above)
//
// Every server needs wal_level=logical (shards move by logical replication).
// The demo says which role the service runs as, and warns when it is not
// an application role.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

type options struct {
	users, workers, moves, parallel, shards int
	warmup, cooldown                        time.Duration
	verbose, soak, pooled, switchover       bool
	heapProfile                             string
}

func main() {
	var o options
	flag.IntVar(&o.users, "users", 200, "users the load generator creates")
	flag.IntVar(&o.workers, "workers", 8, "concurrent load clients")
	flag.IntVar(&o.moves, "moves", 8, "logical shards to move onto the new server while the load runs")
	flag.IntVar(&o.parallel, "parallel", 2, "moves at a time")
	flag.IntVar(&o.shards, "shards", 2000, "logical shards")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "load before the moves start")
	flag.DurationVar(&o.cooldown, "cooldown", 5*time.Second, "load after the moves end")
	flag.BoolVar(&o.verbose, "v", false, "show the service's and the mover's logs")
	flag.StringVar(&o.heapProfile, "heapprofile", "", "write the live heap's profile to this file after the load (go tool pprof)")
	flag.BoolVar(&o.pooled, "pooled", false, "put a PgBouncer in transaction mode in front of each local server: the service's statements go through it, moves connect directly")
	flag.BoolVar(&o.switchover, "switchover", false, "instead of moving shards, switch server pg1's primary over to a synchronous standby under the load (failover.Switchover)")
	flag.BoolVar(&o.soak, "soak", false, "fail if the process's goroutines or live heap, or the servers' largest backend, grew past their bounds under the load (make reliability)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &watchedWriter{w: os.Stdout}
	go out.watch(ctx, 90*time.Second, os.Stderr)
	if err := run(ctx, o, out); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%5.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	c, err := servers(ctx, o, say)
	if err != nil {
		return err
	}
	defer c.stop()
	// Provisioning and moves are the operator's: the catalog's and the
	// servers' admin DSNs. The service gets the application's DSNs only:
	// the catalog as its login, and the servers' application DSNs, which
	// its router reads from the catalog.
	opCfg := app.Config{Catalog: store.CatalogDSN(c.catalog), Provision: true, Servers: c.servers, Shards: o.shards}
	say("provisioning %d logical shards on %s", opCfg.Shards, serverNames(opCfg.Servers))
	t := time.Now()
	if err := app.Provision(ctx, opCfg, log); err != nil {
		return err
	}
	say("provisioned in %s", time.Since(t).Round(time.Millisecond))
	op, err := catalog.Open(ctx, c.catalog)
	if err != nil {
		return err
	}
	defer op.Close()
	op = op.Operator()
	cfg := app.Config{Addr: "127.0.0.1:0", Catalog: store.CatalogDSN(c.appCatalog), FenceWait: store.FenceWait(2 * time.Second), Shards: o.shards}
	a, url, stopService, err := service(ctx, cfg, say, log)
	if err != nil {
		return err
	}
	defer stopService()
	if err := sayRole(ctx, a, c.catalog, c.local, say); err != nil {
		return err
	}
	if o.switchover {
		return loadAndSwitch(ctx, o, out, c, op, a, url, say)
	}
	s, err := loadAndMove(ctx, o, out, c, opCfg, op, a, url, start, say, log)
	if err != nil {
		return err
	}
	if o.heapProfile != "" {
		if err := writeHeapProfile(o.heapProfile); err != nil {
			return err
		}
	}
	s.print(out)
	// For make figures; nothing unless SHARDKIT_FIGURES_OUT names a file.
	name := "Demo"
	if o.pooled {
		name = "DemoPooled"
	}
	if err := benchout.Write(name, s.metrics()...); err != nil {
		return err
	}
	return s.check(o.soak)
}

// servers starts the local clusters (or takes those $SHARDKIT_DEMO_SERVERS
// names); the caller stops them.
func servers(ctx context.Context, o options, say func(string, ...any)) (cluster, error) {
	c, external, err := fromEnv()
	if err != nil {
		return c, err
	}
	if external {
		say("using the servers in $%s: %s", envServers, serverNames(c.servers))
		return c, nil
	}
	say("starting PostgreSQL with internal/harness/pglocal: a catalog and 3 servers (wal_level=logical)")
	if o.pooled {
		say("each server behind a PgBouncer in transaction mode (internal/harness/pgbouncer): the service's statements go through it, provisioning and moves connect directly")
	}
	return startLocal(ctx, 3, o.pooled)
}

// service serves the photo service on a free port; stop shuts it down.
func service(ctx context.Context, cfg app.Config, say func(string, ...any), log *slog.Logger) (a *app.App, url string, stop func(), err error) {
	a, cleanup, err := app.Initialize(ctx, cfg, log)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.ServeListener(sctx, ln) }()
	url = "http://" + ln.Addr().String()
	say("photo service on %s (admin page: %s/admin, metrics: %s/metrics)", url, url, url)
	return a, url, func() { stopServer(); <-served; cleanup() }, nil
}

// loadAndMove runs the load, moves shards in the middle of it, and
// returns what the summary prints.
func loadAndMove(ctx context.Context, o options, out io.Writer, c cluster, cfg app.Config, op *catalog.Catalog, a *app.App, url string,
	start time.Time, say func(string, ...any), log *slog.Logger) (summary, error) {
	runner := loadgen.New(loadgen.Config{URL: url, Users: o.users, Workers: o.workers, Progress: out, ProgressEvery: 2 * time.Second})
	say("load: creating %d users, their first photos and follows", o.users)
	if err := runner.Setup(ctx); err != nil {
		return summary{}, err
	}
	idle := readResources(start)
	say("idle before the load: %s", idle)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan loadgen.Result, 1)
	go func() { loadDone <- runner.Run(loadCtx) }()
	go sayResources(loadCtx, start, op, say)
	say("load: running (uploads, likes, follows, feed reads) with %d workers", o.workers)
	if err := sleep(ctx, o.warmup); err != nil {
		return summary{}, err
	}
	warm := readResources(start)
	say("after the warm-up: %s", warm)
	warmBackends, err := operatorBackends(ctx, op)
	if err != nil {
		return summary{}, err
	}
	say("after the warm-up: %s", warmBackends)
	snapBefore := a.Router.Snapshot()
	before, err := a.Stats.Rows(ctx, snapBefore)
	if err != nil {
		return summary{}, err
	}
	mv, err := moveShards(ctx, o, c, cfg, op, a, runner, say, log)
	if err != nil {
		stopLoad()
		<-loadDone
		return summary{}, err
	}
	if err := sleep(ctx, o.cooldown); err != nil {
		return summary{}, err
	}
	stopLoad()
	res := <-loadDone
	say("load stopped")
	endBackends, err := operatorBackends(ctx, op)
	if err != nil {
		return summary{}, err
	}
	say("at the end of the load: %s", endBackends)
	if err := mv.finish(ctx, say); err != nil {
		return summary{}, err
	}
	end := settle(ctx, start, idle.goroutines+goroutineSlack, 30*time.Second)
	say("after the load: %s (idle before it: %s)", end, idle)
	snapAfter := a.Router.Snapshot()
	after, err := a.Stats.Rows(ctx, snapAfter)
	if err != nil {
		return summary{}, err
	}
	return summary{before: before, after: after, versionBefore: snapBefore.Version, versionAfter: snapAfter.Version,
		load: res, moves: mv.done, windowMaxWrite: runner.WindowMaxWrite(), fenceWaitMax: a.Metrics.MaxFenceWait(),
		elapsed: time.Since(start), idle: idle, warm: warm, end: end, warmBackends: warmBackends, endBackends: endBackends}, nil
}

// sayResources reports the process's resources every minute until ctx ends.
// and the servers' backends beside them: a backend's caches grow as it
// touches more shard tables and prepares more reads, up to their bounds, and
// a soak shows whether they level off.
func sayResources(ctx context.Context, start time.Time, op *catalog.Catalog, say func(string, ...any)) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b, err := operatorBackends(ctx, op)
			if err != nil {
				say("under load: %s; server backends unknown: %v", readResources(start), err)
				continue
			}
			say("under load: %s; %s", readResources(start), b)
		}
	}
}

// operatorBackends reads the servers' backends through their admin DSNs,
// from the operator's view of the catalog: the service's router holds no
// admin DSN, and its role may not read other roles' backends.
func operatorBackends(ctx context.Context, op *catalog.Catalog) (backends, error) {
	snap, err := op.Load(ctx)
	if err != nil {
		return backends{}, err
	}
	return readBackends(ctx, directDSNs(snap))
}

// directDSNs maps each server of an operator's map to a DSN that reaches
// it directly.
func directDSNs(snap *router.Snapshot) map[string]string {
	m := map[string]string{}
	for _, s := range snap.Servers() {
		m[s.Name] = s.Admin()
	}
	return m
}

// provisionAdded registers a new server in the catalog (with no shards).
func provisionAdded(ctx context.Context, cfg app.Config, added migrations.ServerSpec, log *slog.Logger) error {
	cfg.Servers = append(append([]migrations.ServerSpec(nil), cfg.Servers...), added)
	return app.Provision(ctx, cfg, log)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// watchedWriter is the demo's output; watch dumps every goroutine's stack
// to errw when nothing was printed for a while, so a stuck run shows where
// it waits without anyone having to send SIGQUIT.
type watchedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	last time.Time
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Now()
	return w.w.Write(p)
}

func (w *watchedWriter) watch(ctx context.Context, quiet time.Duration, errw io.Writer) {
	t := time.NewTicker(quiet / 6)
	defer t.Stop()
	var dumped time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		last := w.last
		w.mu.Unlock()
		if !last.IsZero() && time.Since(last) > quiet && dumped.Before(last) {
			fmt.Fprintf(errw, "demo: nothing printed for %s; goroutines:\n", time.Since(last).Round(time.Second))
			_ = pprof.Lookup("goroutine").WriteTo(errw, 2)
			dumped = time.Now()
		}
	}
}
