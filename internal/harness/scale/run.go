package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

// Run starts the environment, the app processes and the load, moves
// shards in the middle of it, stops everything and returns what it
// measured. The calling binary must call AppMain first (see the package
// comment).
func Run(ctx context.Context, o Options, log *slog.Logger) (*Result, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	t0 := time.Now()
	e, err := startEnv(ctx, o, log)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	log.Info("environment ready", "servers", o.Servers, "shards", o.Shards, "pooled", !o.Direct, "took", time.Since(t0).Round(time.Millisecond))
	r := &run{o: o, e: e, log: log, res: &Result{Options: o}, flips: map[int64]int64{}}
	return r.res, r.do(ctx)
}

// run is one Run under way.
type run struct {
	o     Options
	e     *env
	log   *slog.Logger
	res   *Result
	procs []*proc

	relays  []*relayProc
	sockets []string // the relays' sockets

	mu    sync.Mutex
	flips map[int64]int64 // map version → unix ns at which the harness heard of it
}

// proc is one app process.
type proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	stderr  bytes.Buffer
	spawned time.Time
	ready   time.Time
	report  *appReport
}

func (r *run) do(ctx context.Context) error {
	stopListen, err := r.listenFlips(ctx)
	if err != nil {
		return err
	}
	defer stopListen()
	if r.o.Relays > 0 {
		dir, err := os.MkdirTemp("", "shardkit-relays-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		defer r.stopRelays()
		if err := r.startRelays(ctx, dir); err != nil {
			return err
		}
	}
	defer r.killAll()
	if err := r.spawn(ctx); err != nil {
		return err
	}
	cat, err := catalog.Open(ctx, r.e.catalogAdmin)
	if err != nil {
		return err
	}
	defer cat.Close()
	r.res.BackendsStart, err = readBackends(ctx, r.serverAdmins())
	if err != nil {
		return err
	}
	cpu0, relay0, srv0, at0 := r.catalogCPU(), r.relayCPU(), r.serversCPU(), time.Now()
	sampler := r.sampleCatalog(ctx)

	sleep(ctx, r.o.Load)
	r.res.RSSMid = r.rss()
	if err := r.move(ctx, cat); err != nil {
		return err
	}
	sleep(ctx, r.o.Load)

	r.res.RSSLate = r.rss()
	r.res.CatalogCPU = r.catalogCPU() - cpu0
	r.res.RelayCPU = r.relayCPU() - relay0
	r.res.ServerCPU = r.serversCPU() - srv0
	r.res.Window = time.Since(at0)
	sampler()
	if r.res.BackendsEnd, err = readBackends(ctx, r.serverAdmins()); err != nil {
		return err
	}
	if r.res.FinalVersion, err = cat.MapVersion(ctx); err != nil {
		return err
	}
	if err := r.collect(); err != nil {
		return err
	}
	r.mu.Lock()
	r.res.summarise(r.procs, r.flips)
	r.mu.Unlock()
	return nil
}

// spawn starts every app process at once, as a deploy that restarts a
// fleet does, and waits until each says it is ready.
func (r *run) spawn(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	start, cpu0 := time.Now(), r.serversCPU()
	for i := range r.o.Procs {
		cfg, _ := json.Marshal(appConfig{Index: i, CatalogDSN: r.e.catalogDSN, Routers: r.o.Routers, Poll: r.o.Poll,
			Every: r.o.Every, WarmUp: r.o.WarmUp, FirstRead: r.o.FirstRead, Together: r.o.Together, LeaseBits: r.o.LeaseBits, Relays: r.sockets, OwnGORM: r.o.OwnGORMPool, Spawned: time.Now().UnixNano()})
		p := &proc{cmd: exec.Command(exe)}
		p.cmd.Stderr = &limitedWriter{w: &p.stderr, n: 4096}
		p.spawned = time.Now()
		if p.stdin, p.out, err = startChild(p.cmd, envApp, cfg); err != nil {
			return fmt.Errorf("start app process %d: %w", i, err)
		}
		r.procs = append(r.procs, p)
	}
	r.log.Info("app processes started", "procs", r.o.Procs, "took", time.Since(start).Round(time.Millisecond))
	if r.o.Together {
		at := time.Now()
		for i, p := range r.procs {
			if _, err := fmt.Fprintln(p.stdin, "go"); err != nil {
				return fmt.Errorf("start app process %d: %w", i, err)
			}
			p.spawned = at
		}
		start, cpu0 = at, r.serversCPU()
	}
	errs := make(chan error, len(r.procs))
	for i, p := range r.procs {
		go func() {
			line, err := readLine(p.out)
			if err == nil && line != "ready" {
				err = fmt.Errorf("said %q", line)
			}
			if err != nil {
				_ = p.cmd.Wait()
				errs <- fmt.Errorf("app process %d did not start: %v: %s", i, err, p.stderr.String())
				return
			}
			p.ready = time.Now()
			errs <- nil
		}()
	}
	timeout := time.After(r.o.Ready)
	for range r.procs {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
		case <-timeout:
			return fmt.Errorf("scale: not every app process started within %v", r.o.Ready)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.res.ServerStartCPU = r.serversCPU() - cpu0
	r.log.Info("app processes ready", "procs", r.o.Procs, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// serversCPU is the CPU seconds the shard servers' clusters have used so
// far.
func (r *run) serversCPU() float64 {
	cpu := 0.0
	for _, c := range r.e.set.Clusters[1:] {
		cpu += clusterCPU(c.Dir)
	}
	return cpu
}

// startChild starts cmd, this binary run again in the mode that the
// environment variable env selects, with cfg (JSON) as its value, and
// returns its stdin and stdout.
func startChild(cmd *exec.Cmd, env string, cfg []byte) (io.WriteCloser, *bufio.Reader, error) {
	cmd.Env = append(os.Environ(), env+"="+string(cfg))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return stdin, bufio.NewReaderSize(out, 1<<20), nil
}

// move moves o.Moves shards, one after the other, from the first server
// to the last, with the load running.
func (r *run) move(ctx context.Context, cat *catalog.Catalog) error {
	if r.o.Moves == 0 {
		return nil
	}
	mover, err := rebalance.New(rebalance.Config{Catalog: cat, Logger: r.log, StepTimeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer mover.Close()
	from, to := r.e.servers[0].Name, r.e.servers[len(r.e.servers)-1].Name
	for i := range r.o.Moves {
		t := time.Now()
		// Shards 0, 1, …: the first server holds the first range.
		plan := []rebalance.PlannedMove{{Shard: i, From: from, To: to}}
		if _, err := mover.Rebalance(ctx, plan, rebalance.Options{Parallel: 1}); err != nil {
			return fmt.Errorf("scale: move shard %d %s → %s: %w", i, from, to, err)
		}
		r.res.MoveTimes = append(r.res.MoveTimes, time.Since(t))
		r.log.Info("moved", "shard", i, "from", from, "to", to, "took", time.Since(t).Round(time.Millisecond))
	}
	return nil
}

// listenFlips records when each new map version is announced, on a
// direct connection to the catalog: the start of each propagation.
func (r *run) listenFlips(ctx context.Context) (stop func(), err error) {
	conn, err := pgx.Connect(ctx, r.e.catalogAdmin)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{router.MapChannel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil {
				return
			}
			at := time.Now().UnixNano()
			if v, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				r.mu.Lock()
				r.flips[v] = at
				r.mu.Unlock()
			}
		}
	}()
	return func() { cancel(); <-done; conn.Close(context.Background()) }, nil
}

// sampleCatalog samples the catalog's backends and its pooler's clients
// every second until the returned function is called.
func (r *run) sampleCatalog(ctx context.Context) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if b, err := readBackends(sctx, []string{r.e.catalogAdmin}); err == nil {
				r.res.CatalogBackends = max(r.res.CatalogBackends, b.Count)
			}
			if r.e.catalogBouncer != nil {
				r.res.CatalogClients = max(r.res.CatalogClients, poolerClients(sctx, r.e.catalogBouncer.DSN("pgbouncer")))
			}
			servers := 0
			for _, b := range r.e.bouncers {
				if b != r.e.catalogBouncer {
					servers += poolerClients(sctx, b.DSN("pgbouncer"))
				}
			}
			r.res.ServerClients = max(r.res.ServerClients, servers)
			select {
			case <-sctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// catalogCPU is the CPU seconds the catalog's cluster (and its pooler)
// has used so far.
func (r *run) catalogCPU() float64 {
	cpu := treeCPU(postmaster(r.e.set.Clusters[0].Dir))
	if b := r.e.catalogBouncer; b != nil {
		_, c, _ := procStat(pidFile(b.Dir + "/pgbouncer.pid"))
		cpu += c
	}
	return cpu
}

func (r *run) serverAdmins() []string {
	var out []string
	for _, s := range r.e.servers {
		out = append(out, s.AdminDSN)
	}
	return out
}

// collect ends the load (closes each process's stdin) and reads the
// reports.
func (r *run) collect() error {
	for _, p := range r.procs {
		_ = p.stdin.Close()
	}
	errs := make(chan error, len(r.procs))
	for i, p := range r.procs {
		go func() {
			var rep appReport
			err := json.NewDecoder(p.out).Decode(&rep)
			werr := p.cmd.Wait()
			if err != nil || werr != nil {
				errs <- fmt.Errorf("app process %d: report: %v, exit: %v: %s", i, err, werr, p.stderr.String())
				return
			}
			p.report = &rep
			errs <- nil
		}()
	}
	var first error
	for range r.procs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// killAll kills app processes still running (after an error).
func (r *run) killAll() {
	for _, p := range r.procs {
		if p.cmd.ProcessState == nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
	n  int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// rss reads each app process's resident set from outside (no collection
// forced): the memory between the start and the end of the load.
func (r *run) rss() []float64 {
	var out []float64
	for _, p := range r.procs {
		if mb, ok := statmRSS("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/statm"); ok {
			out = append(out, mb)
		}
	}
	return out
}
