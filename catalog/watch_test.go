package catalog

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// waitVersion waits until r serves map version v or later.
func waitVersion(t *testing.T, ctx context.Context, r *router.Router, updates <-chan *router.Snapshot, v int64) {
	t.Helper()
	for r.Snapshot().Version < v {
		select {
		case <-updates:
		case <-ctx.Done():
			t.Fatalf("the router still serves version %d, want %d", r.Snapshot().Version, v)
		}
	}
}

// TestWatchPollLoadsChanges: a polling router follows every kind of map
// change, reading only the changed rows, and ends with the map a full
// Load reads.
func TestWatchPollLoadsChanges(t *testing.T) {
	cat, _ := seedCatalog(t, 16, idgen.DefaultLayout())
	ctx := testCtx(t)
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	updates, unsubscribe := r.Subscribe()
	defer unsubscribe()
	wctx, stop := context.WithCancel(ctx)
	watchErr := make(chan error, 1)
	go func() { watchErr <- r.WatchWith(wctx, router.WatchOptions{Poll: 10 * time.Millisecond}) }()

	changes := []struct {
		name string
		do   func() error
	}{
		{"place", func() error { _, err := cat.PlaceShard(ctx, 3, "alpha", router.StateActive); return err }},
		{"state", func() error { return cat.Moves().SetShardState(ctx, 4, "alpha", router.StateMoving) }},
		{"flip", func() error {
			if _, err := cat.Moves().ChangeShardState(ctx, 4, "alpha", router.StateMoving, router.StateFenced); err != nil {
				return err
			}
			return cat.Moves().FlipShard(ctx, 4, "alpha", "beta")
		}},
		{"server DSN", func() error {
			return cat.Update(ctx, func(ctx context.Context, tx *Tx) error {
				return tx.SetServerDSN(ctx, "beta", "postgres://pooler/db", "postgres://beta/db")
			})
		}},
	}
	for _, c := range changes {
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, err := cat.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitVersion(t, ctx, r, updates, want.Version)
		got := r.Snapshot()
		if got.Version != want.Version || !reflect.DeepEqual(got.Placements(), want.Placements()) ||
			!reflect.DeepEqual(got.Servers(), want.Servers()) || got.Layout != want.Layout || got.Shards != want.Shards {
			t.Fatalf("%s: the polled map differs from a full Load:\n got %d %+v %+v\nwant %d %+v %+v", c.name,
				got.Version, got.Placements(), got.Servers(), want.Version, want.Placements(), want.Servers())
		}
	}
	// An application's router: the admin DSN stays in the catalog.
	if b, _ := r.Snapshot().Server("beta"); b.DSN != "postgres://pooler/db" || b.Admin() != "" || !b.AdminHidden {
		t.Fatalf("beta in the polled map: %+v", b)
	}
	stop()
	if err := <-watchErr; err != context.Canceled {
		t.Fatalf("WatchWith returned %v", err)
	}
}

// pollEvery is TestPollPropagation's interval: go test -run
// TestPollPropagation -v ./catalog -args -poll=1s measures the default.
var pollEvery = flag.Duration("poll", 100*time.Millisecond, "TestPollPropagation: the routers' poll interval")

// TestPollPropagation measures how long a map change takes to reach 100
// routers of one process that poll through one catalog, and how many
// catalog connections they hold: at most the catalog pool's, where
// listening routers hold one each. It asserts no timing, only that every
// router arrives; run with -v for the figures.
func TestPollPropagation(t *testing.T) {
	cat, _ := seedCatalog(t, 2000, idgen.DefaultLayout())
	pollPropagation(t, cat, cat, "direct")
}

// TestPollPropagationThroughPooler is TestPollPropagation with the
// routers' catalog behind a PgBouncer in transaction mode: the version
// checks and reloads go through it; the map changes are made directly.
func TestPollPropagationThroughPooler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PgBouncer; the first stage of make test runs it")
	}
	cat, dsn := seedCatalog(t, 2000, idgen.DefaultLayout())
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Options{Port: pgtest.Cluster(t, 0).Port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	pooled, err := Open(context.Background(), b.DSN(strings.TrimPrefix(u.Path, "/")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pooled.Close)
	pollPropagation(t, cat, pooled, "through PgBouncer")
}

// pollPropagation makes map changes on cat and times their arrival at 100
// polling routers that read the map from routersCat.
func pollPropagation(t *testing.T, cat, routersCat *Catalog, how string) {
	const routers, flips = 100, 5
	poll := *pollEvery
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs := make([]*router.Router, routers)
	subs := make([]<-chan *router.Snapshot, routers)
	for i := range rs {
		r, err := router.New(ctx, routersCat)
		if err != nil {
			t.Fatal(err)
		}
		ch, unsubscribe := r.Subscribe()
		defer unsubscribe()
		rs[i], subs[i] = r, ch
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() { _ = r.WatchWith(wctx, router.WatchOptions{Poll: poll}) })
	}
	defer func() { stop(); wg.Wait() }()

	var lat []time.Duration
	maxConns := routersCat.pool.Stat().TotalConns()
	for f := range flips {
		// The routers of a process share one version check, so every
		// flip reaches all of them at the same poll, and the flip before
		// this one was seen just after a poll. A change made then waits a
		// whole interval; a change's moment is anyone's, so the flips are
		// made at phases spread over the interval (0.1, 0.3, ... of it
		// after that poll), not all at its start.
		time.Sleep(poll * time.Duration(2*f+1) / (2 * flips))
		start := time.Now()
		v, err := cat.PlaceShard(ctx, 7, testServers[f%2], router.StateActive)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]time.Duration, routers)
		var rwg sync.WaitGroup
		for i := range rs {
			rwg.Go(func() {
				for rs[i].Snapshot().Version < v {
					select {
					case <-subs[i]:
					case <-ctx.Done():
						return
					}
				}
				got[i] = time.Since(start)
			})
		}
		rwg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("flip %d: not every router reached version %d", f, v)
		}
		for i, r := range rs {
			if p, _ := r.Snapshot().Placement(7); p.Server != testServers[f%2] {
				t.Fatalf("router %d: shard 7 on %s, want %s", i, p.Server, testServers[f%2])
			}
		}
		lat = append(lat, got...)
		maxConns = max(maxConns, routersCat.pool.Stat().TotalConns())
	}
	var backends int
	if err := cat.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&backends); err != nil {
		t.Fatal(err)
	}
	slices.Sort(lat)
	t.Logf("%d routers polling every %v (%s), %d flips: map change served by every router after p50 %v, p99 %v, max %v",
		routers, poll, how, flips, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond),
		lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("catalog connections: pool max %d, at most %d open in the pool, %d backends on the catalog database at the end (its own pool's included)",
		routersCat.pool.Config().MaxConns, maxConns, backends)
	if int32(backends) > cat.pool.Config().MaxConns+routersCat.pool.Config().MaxConns {
		t.Fatalf("%d backends on the catalog for %d polling routers; the pools allow %d", backends, routers, cat.pool.Config().MaxConns+routersCat.pool.Config().MaxConns)
	}
	if err := benchout.Write("PollPropagation/"+strings.ReplaceAll(how, " ", "_"),
		benchout.Metric{Value: float64(routers), Unit: "routers"},
		benchout.Metric{Value: float64(poll.Milliseconds()), Unit: "poll-ms"},
		benchout.Metric{Value: float64(lat[len(lat)/2].Milliseconds()), Unit: "p50-ms"},
		benchout.Metric{Value: float64(lat[len(lat)*99/100].Milliseconds()), Unit: "p99-ms"},
		benchout.Metric{Value: float64(lat[len(lat)-1].Milliseconds()), Unit: "max-ms"},
		benchout.Metric{Value: float64(backends), Unit: "catalog-backends"}); err != nil {
		t.Fatal(err)
	}
}

// countingCatalog counts the version checks and reloads routers make.
type countingCatalog struct {
	*Catalog
	checks, reloads *atomic.Int64
}

func (c countingCatalog) MapVersion(ctx context.Context) (int64, error) {
	c.checks.Add(1)
	return c.Catalog.MapVersion(ctx)
}

func (c countingCatalog) LoadChanges(ctx context.Context, since *router.Snapshot) (*router.Snapshot, error) {
	c.reloads.Add(1)
	return c.Catalog.LoadChanges(ctx, since)
}

// TestPollShared: the polling routers of one process on one catalog share
// one version check per interval and one reload per map change, so the
// catalog's work does not grow with the number of routers.
func TestPollShared(t *testing.T) {
	const routers, poll = 50, 20 * time.Millisecond
	cat, _ := seedCatalog(t, 64, idgen.DefaultLayout())
	ctx := testCtx(t)
	src := countingCatalog{Catalog: cat, checks: new(atomic.Int64), reloads: new(atomic.Int64)}
	rs := make([]*router.Router, routers)
	for i := range rs {
		r, err := router.New(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = r
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range rs {
		wg.Go(func() { _ = r.WatchWith(wctx, router.WatchOptions{Poll: poll}) })
	}
	v, err := cat.PlaceShard(ctx, 5, testServers[1], router.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		testkit.Until(t, testkit.Wait, func() error {
			if got := r.Snapshot().Version; got < v {
				return fmt.Errorf("router %d still serves version %d, want %d", i, got, v)
			}
			return nil
		})
	}
	time.Sleep(10 * poll) // a window of idle intervals, whose checks the bound below counts
	stop()
	wg.Wait()
	elapsed := time.Since(start)
	// One shared check runs at most once per interval (each starts an
	// interval after the previous ended); one per router would be 50 times that.
	if c, most := src.checks.Load(), int64(elapsed/poll)+2; c > most {
		t.Fatalf("%d routers made %d version checks in %v; one shared check makes at most %d", routers, c, elapsed, most)
	}
	if n := src.reloads.Load(); n != 1 {
		t.Fatalf("%d routers reloaded the changed rows %d times for one map change, want once", routers, n)
	}
}

// TestPollLateJoiner: a router that starts polling after the routers
// already polling took a map change still gets that change, though the
// catalog has nothing newer than what those routers hold.
func TestPollLateJoiner(t *testing.T) {
	const poll = 10 * time.Millisecond
	cat, _ := seedCatalog(t, 8, idgen.DefaultLayout())
	ctx := testCtx(t)
	early, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	late, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { _ = early.WatchWith(wctx, router.WatchOptions{Poll: poll}) })
	v, err := cat.PlaceShard(ctx, 5, testServers[1], router.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	updates, unsubscribe := early.Subscribe()
	defer unsubscribe()
	waitVersion(t, ctx, early, updates, v)

	if got := late.Snapshot().Version; got >= v {
		t.Fatalf("the late router serves version %d before it watches, want older than %d", got, v)
	}
	lateUpdates, unsubscribeLate := late.Subscribe()
	defer unsubscribeLate()
	wg.Go(func() { _ = late.WatchWith(wctx, router.WatchOptions{Poll: poll}) })
	waitVersion(t, ctx, late, lateUpdates, v)
}
