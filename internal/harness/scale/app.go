package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

// envApp names the environment variable that makes a harness binary an
// app process; its value is the process's appConfig as JSON.
const envApp = "SHARDKIT_SCALE_APP"

// appConfig is what the harness tells each app process.
type appConfig struct {
	Index      int
	CatalogDSN string
	Routers    int
	Poll       time.Duration
	Every      time.Duration
	WarmUp     string
	FirstRead  bool
	Together   bool // wait for "go" on stdin before starting; start-up is timed from it
	LeaseBits  int
	Relays     []string // the relays' sockets; none: the routers poll the catalog
	OwnGORM    bool     // GORM opens a pool of its own on the catalog database (Options.OwnGORMPool)
	Spawned    int64    // unix ns at which the harness started the process
}

// waitGo reads the harness's "go" (see Options.Together) and returns in
// for the rest.
func waitGo(in io.Reader) (io.Reader, error) {
	br := bufio.NewReader(in)
	line, err := readLine(br)
	if err == nil && line != "go" {
		err = fmt.Errorf("harness said %q, want go", line)
	}
	return br, err
}

// appReport is what an app process reports when its stdin closes.
type appReport struct {
	Index     int
	Path      string        // "go": IDs made in Go with a leased slot; "db": next_id() with RETURNING
	Startup   time.Duration // spawn to the plugin ready (db.Use returned)
	CatOpened time.Duration // spawn to the plugin's router's catalog open (connected, pinged)
	Routed    time.Duration // spawn to every router loaded
	Leased    time.Duration // spawn to the ID slot leased (or refused)
	Opened    time.Duration // spawn to GORM open on the catalog database, before the plugin's Use
	FirstRead time.Duration // 0 unless asked for
	Writes    int
	Reads     int
	Errors    int
	Samples   []string // the first few errors
	IDs       []int64
	Misplaced int // IDs whose shard bits are not their key's shard
	TakenDown int // times the plugin took a server as down (plugin.ServerState.TakenDown), all servers
	Routers   []routerLog
	Start     memory // after start-up
	End       memory // after the load
}

// routerLog is when one router installed each map version.
type routerLog struct {
	First    int64   // the version it started with
	Versions []int64 // versions installed after, in order
	At       []int64 // unix ns of each
	Final    int64   // the version it serves at the end
	mu       sync.Mutex
}

type memory struct {
	RSSMB, HeapMB float64
}

// AppMain runs this process as an app process of the harness when the
// harness started it so, and then exits; otherwise it returns at once.
// Call it first in main or TestMain of any binary that calls Run.
func AppMain() {
	if raw := os.Getenv(envRelay); raw != "" {
		var cfg relayConfig
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "scale relay:", err)
			os.Exit(2)
		}
		if err := runRelay(cfg, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "scale relay:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	raw := os.Getenv(envApp)
	if raw == "" {
		return
	}
	var cfg appConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "scale app:", err)
		os.Exit(2)
	}
	rep, err := runApp(cfg, os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale app %d: %v\n", cfg.Index, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// runApp starts the app, says "ready" on out, runs the load until in
// closes, and returns its report.
func runApp(cfg appConfig, in io.Reader, out io.Writer) (*appReport, error) {
	if cfg.Together {
		var err error
		if in, err = waitGo(in); err != nil {
			return nil, err
		}
		cfg.Spawned = time.Now().UnixNano()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep := &appReport{Index: cfg.Index, Path: "go"}
	var watchers sync.WaitGroup
	wctx, stopWatch := context.WithCancel(ctx)
	defer func() { stopWatch(); watchers.Wait() }()
	routers, cats, pool, err := startRouters(ctx, wctx, cfg, rep, &watchers)
	defer func() {
		for _, c := range cats {
			c.Close()
		}
		if pool != nil {
			pool.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	rt := routers[0]
	rep.Routed = time.Since(time.Unix(0, cfg.Spawned))
	db, p, closeDB, err := startPlugin(ctx, cfg, cats[0], pool, rt, rep)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	rep.Startup = time.Since(time.Unix(0, cfg.Spawned))
	if cfg.FirstRead {
		t := time.Now()
		var n int64
		if err := db.WithContext(ctx).Clauses(plugin.AllShards()).Model(&Item{}).Count(&n).Error; err != nil {
			rep.fail(err)
		}
		rep.FirstRead = time.Since(t)
	}
	rep.Start = readMemory()
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return nil, err
	}

	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(stop) }()
	for {
		select {
		case <-stop:
			stopWatch()
			watchers.Wait()
			for i, r := range routers {
				rep.Routers[i].Final = r.Snapshot().Version
			}
			for _, h := range p.State().Servers {
				rep.TakenDown += int(h.TakenDown)
			}
			rep.End = readMemory()
			return rep, nil
		case <-time.After(time.Duration(float64(cfg.Every) * (0.5 + rand.Float64()))):
		}
		rep.writeAndRead(ctx, db, rt, cfg.Index)
	}
}

// startRouters opens the process's routers, each watching the map until
// wctx ends and logging the versions it serves: the first serves the
// plugin, the others stand in for routers of other processes (each its own
// catalog pool, or its own relay client). Without relays each polls the
// catalog; with relays each waits on one of them (the routers of all the
// processes in turn across the relays), and only the first opens the
// catalog, for the plugin's ID lease. The catalogs returned are to be
// closed, also on error; the first is the plugin's, on the pool returned
// (nil with appConfig.OwnGORM), which GORM shares and which is to be
// closed after them.
func startRouters(ctx, wctx context.Context, cfg appConfig, rep *appReport, watchers *sync.WaitGroup) ([]*router.Router, []*catalog.Catalog, *pgxpool.Pool, error) {
	var cats []*catalog.Catalog
	var pool *pgxpool.Pool
	routers := make([]*router.Router, cfg.Routers)
	rep.Routers = make([]routerLog, cfg.Routers)
	watch := router.WatchOptions{Poll: cfg.Poll}
	if len(cfg.Relays) > 0 {
		watch = router.WatchOptions{Listen: true}
	}
	for i := range routers {
		var src router.Source
		if i == 0 && !cfg.OwnGORM {
			var err error
			if pool, err = openCatalogPool(ctx, cfg.CatalogDSN); err != nil {
				return nil, cats, nil, err
			}
			cats = append(cats, catalog.New(pool))
			src = cats[0]
		} else if i == 0 || len(cfg.Relays) == 0 {
			cat, err := catalog.Open(ctx, cfg.CatalogDSN)
			if err != nil {
				return nil, cats, pool, err
			}
			cats = append(cats, cat)
			src = cat
		}
		if i == 0 {
			rep.CatOpened = time.Since(time.Unix(0, cfg.Spawned))
		}
		if len(cfg.Relays) > 0 {
			src = relay.Dial(cfg.Relays[(cfg.Index*cfg.Routers+i)%len(cfg.Relays)])
		}
		r, err := router.New(ctx, src)
		if err != nil {
			return nil, cats, pool, err
		}
		routers[i] = r
		log := &rep.Routers[i]
		updates, unsubscribe := r.Subscribe()
		log.First = r.Snapshot().Version
		watchers.Go(func() {
			defer unsubscribe()
			for {
				select {
				case <-wctx.Done():
					return
				case s := <-updates:
					log.mu.Lock()
					log.Versions = append(log.Versions, s.Version)
					log.At = append(log.At, time.Now().UnixNano())
					log.mu.Unlock()
				}
			}
		})
		watchers.Go(func() { _ = r.WatchWith(wctx, watch) })
	}
	return routers, cats, pool, nil
}

// openCatalogPool opens a pool on the catalog database as catalog.Open
// does (its statements unnamed, their descriptions cached, unless the DSN
// says otherwise) and checks that it answers: one pool for the process's
// router, ID lease and GORM's own connection, so that the process's start
// makes one new backend on the catalog, not one for each.
func openCatalogPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// startPlugin leases the process's ID slot (or leaves IDs to next_id()
// when none is free), opens GORM (on pool, the catalog's, unless nil) with
// the plugin on rt and returns both with what closes them.
func startPlugin(ctx context.Context, cfg appConfig, cat *catalog.Catalog, pool *pgxpool.Pool, rt *router.Router, rep *appReport) (*gorm.DB, *plugin.Plugin, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	pcfg := plugin.Config{Router: rt, StatementTimeout: -1}
	gen, release, err := catalog.StartGenerator(ctx, cat,
		catalog.LeaserConfig{Holder: fmt.Sprintf("scale-%d@%d", cfg.Index, os.Getpid()), LeaseBits: uint8(cfg.LeaseBits)}, idgen.Config{})
	switch {
	case errors.Is(err, idgen.ErrNoFreeSlot):
		rep.Path = "db"
	case err != nil:
		return nil, nil, nil, err
	default:
		closers = append(closers, release)
		pcfg.IDs = gen
	}
	rep.Leased = time.Since(time.Unix(0, cfg.Spawned))
	switch cfg.WarmUp {
	case "bounded":
		pcfg.WarmUp = plugin.WarmUpBlocking
	case "full":
		pcfg.WarmUp, pcfg.WarmUpTimeout = plugin.WarmUpBlocking, -1
	case "background":
		pcfg.WarmUp = plugin.WarmUpBackground
	}
	dialector := postgres.Open(cfg.CatalogDSN + "&default_query_exec_mode=exec")
	if pool != nil {
		dialector = postgres.New(postgres.Config{Conn: stdlib.OpenDBFromPool(pool)})
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	closers = append(closers, func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	rep.Opened = time.Since(time.Unix(0, cfg.Spawned))
	p := plugin.Register(pcfg, &Item{})
	if err := db.Use(p); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	closers = append(closers, func() { _ = p.Close() })
	return db, p, closeAll, nil
}

// writeAndRead inserts one item for a random user and reads it back by
// its key and ID.
func (rep *appReport) writeAndRead(ctx context.Context, db *gorm.DB, rt *router.Router, proc int) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	user := rand.Int64N(1 << 40)
	it := Item{UserID: user, Proc: proc, Body: "scale"}
	rep.Writes++
	if err := db.WithContext(ctx).Create(&it).Error; err != nil {
		rep.fail(fmt.Errorf("insert: %w", err))
		return
	}
	rep.IDs = append(rep.IDs, it.ID)
	snap := rt.Snapshot()
	want, _ := router.ShardOfKey(user, snap.Shards)
	if got, err := snap.Layout.ShardOf(it.ID); err != nil || got != want {
		rep.Misplaced++
	}
	var back Item
	rep.Reads++
	if err := db.WithContext(ctx).Where("user_id = ? AND id = ?", user, it.ID).Take(&back).Error; err != nil {
		rep.fail(fmt.Errorf("read back: %w", err))
	}
}

func (rep *appReport) fail(err error) {
	rep.Errors++
	if len(rep.Samples) < 3 {
		rep.Samples = append(rep.Samples, err.Error())
	}
}

// readMemory reads the process's resident set and live heap (after a
// collection).
func readMemory() memory {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := memory{HeapMB: float64(ms.HeapAlloc) / (1 << 20)}
	m.RSSMB, _ = statmRSS("/proc/self/statm")
	return m
}

// statmRSS reads a resident set size, in MB, from a /proc statm file.
func statmRSS(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return float64(pages*int64(os.Getpagesize())) / (1 << 20), err == nil
}

// readLine reads one line from r (the app's "ready").
func readLine(r *bufio.Reader) (string, error) {
	s, err := r.ReadString('\n')
	return strings.TrimSpace(s), err
}
