package plugin

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// TestPoolerBoundsServerBackends runs the same load from many app
// instances (each a gorm.DB with its own plugin and server pools, as each
// app process has) directly against the servers and through a PgBouncer in
// transaction mode in front of each, and counts the servers' backends:
// direct, they grow with the instances; pooled, they stay at the pooler's
// pool size whatever the number of instances.
func TestPoolerBoundsServerBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts many pools; the first stage of make test runs it")
	}
	instances, workers, poolSize := 12, 3, 4
	e := newEnv(t, envOpts{})
	// Only the instances below may hold backends on the shard databases.
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	direct := e.r.Snapshot()
	pooled := poolerSnapshot(t, e, direct, poolSize)

	d := runInstances(t, e, direct, instances, workers)
	p := runInstances(t, e, pooled, instances, workers)
	t.Logf("%d app instances × %d concurrent workers, %d statements each way: server backends (peak over both servers) direct %d, through PgBouncer (default_pool_size %d) %d",
		instances, workers, d.statements, d.peak, poolSize, p.peak)
	if d.statements != p.statements || d.failed+p.failed != 0 {
		t.Fatalf("statements: direct %d (%d failed), pooled %d (%d failed)", d.statements, d.failed, p.statements, p.failed)
	}
	// Each instance holds at least one backend per server while it works.
	if d.peak < instances {
		t.Errorf("direct: peak of %d backends on a server for %d instances; the test does not load the servers as it means to", d.peak, instances)
	}
	if p.peak > poolSize {
		t.Errorf("pooled: peak of %d backends on a server, more than the pooler's pool size %d", p.peak, poolSize)
	}
	if err := benchout.Write("PoolerBackends",
		benchout.Metric{Value: float64(instances), Unit: "instances"},
		benchout.Metric{Value: float64(d.peak), Unit: "direct-backends"},
		benchout.Metric{Value: float64(p.peak), Unit: "pooled-backends"},
		benchout.Metric{Value: float64(poolSize), Unit: "pool-size"}); err != nil {
		t.Fatal(err)
	}
}

// poolerSnapshot is the map in force with each server's DSN replaced by a
// PgBouncer in transaction mode in front of it.
func poolerSnapshot(t *testing.T, e *env, snap *router.Snapshot, poolSize int) *router.Snapshot {
	t.Helper()
	var servers []router.Server
	for i, srv := range snap.Servers() {
		b, err := pgbouncer.Start(context.Background(), pgbouncer.Options{
			Port:     pgtest.Cluster(t, i%2).Port,
			Settings: map[string]string{"default_pool_size": fmt.Sprint(poolSize), "max_client_conn": "1000"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Stop)
		// As an application's catalog says it: the app DSN is the pooler,
		// and the server has an admin DSN apart that the snapshot leaves out.
		srv = behindPooler(srv, b.DSN(dbName(t, e.dsn[srv.Name])))
		srv.AdminDSN, srv.AdminHidden = "", true
		servers = append(servers, srv)
	}
	s, err := router.NewSnapshot(snap.Version, snap.Shards, servers, snap.Placements())
	if err != nil {
		t.Fatal(err)
	}
	s.Layout = snap.Layout
	return s
}

type instanceRun struct {
	statements, failed int64
	peak               int // most client backends seen on one server at once
}

// runInstances opens n app instances on snap and has each run workers
// concurrent loops of an insert and a read by key on every shard, while
// the servers' backends are counted.
func runInstances(t *testing.T, e *env, snap *router.Snapshot, n, workers int) instanceRun {
	t.Helper()
	r, err := router.NewFixed(snap)
	if err != nil {
		t.Fatal(err)
	}
	counter := newBackendCounter(t, e)
	counter.settle(t)
	dbs := make([]*gorm.DB, n)
	var plugins []*Plugin
	defer func() {
		for _, pl := range plugins {
			_ = pl.Close()
		}
	}()
	for i := range dbs {
		db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			t.Fatal(err)
		}
		pl := Register(Config{Router: r, MaxIdleConns: workers}, &Photo{}, &Like{})
		if err := db.Use(pl); err != nil {
			t.Fatal(err)
		}
		plugins = append(plugins, pl)
		dbs[i] = db
	}
	var run instanceRun
	var statements, failed atomic.Int64
	stop := make(chan struct{})
	peak := make(chan int, 1)
	go func() { peak <- counter.peak(stop) }()
	// A barrier holds every worker until all have their first statement
	// ready, so that the instances' connections are open at the same time.
	var ready, done sync.WaitGroup
	ready.Add(n * workers)
	start := make(chan struct{})
	for _, db := range dbs {
		for w := 0; w < workers; w++ {
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				for shard := 0; shard < e.shards; shard++ {
					user := int64(shard + e.shards*(w+1))
					p := Photo{UserID: user, Caption: "backends"}
					err := db.Create(&p).Error
					if err == nil {
						var got Photo
						err = db.Where("user_id = ? AND id = ?", user, p.ID).Take(&got).Error
					}
					statements.Add(2)
					if err != nil {
						failed.Add(1)
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	ready.Wait()
	close(start)
	done.Wait()
	close(stop)
	run.peak = <-peak
	run.statements, run.failed = statements.Load(), failed.Load()
	return run
}

// backendCounter counts the client backends of the shard databases on
// each cluster, over direct connections opened up front.
type backendCounter struct {
	conns []*pgx.Conn
	dbs   []string
}

func newBackendCounter(t *testing.T, e *env) *backendCounter {
	t.Helper()
	c := &backendCounter{}
	for i, name := range e.servers {
		c.conns = append(c.conns, pgtest.Connect(t, pgtest.Cluster(t, i%2).DSN("postgres")))
		c.dbs = append(c.dbs, dbName(t, e.dsn[name]))
	}
	return c
}

// peak samples until stop and returns the most backends seen on one
// shard database at once.
func (c *backendCounter) peak(stop <-chan struct{}) int {
	ctx := context.Background()
	most := 0
	for {
		for i, conn := range c.conns {
			var n int
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = $1`, c.dbs[i]).Scan(&n)
			if err == nil && n > most {
				most = n
			}
		}
		select {
		case <-stop:
			return most
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// settle waits until no client backend is left on the shard databases
// (those of instances closed before: a backend ends a moment after its
// client closes the connection).
func (c *backendCounter) settle(t *testing.T) {
	t.Helper()
	testkit.Until(t, testkit.Wait, func() error {
		var who []string
		for i, conn := range c.conns {
			rows, err := conn.Query(context.Background(), `SELECT format('%s %s %s %s', datname, application_name, state, left(query, 60)) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname = $1`, c.dbs[i])
			if err != nil {
				t.Fatal(err)
			}
			w, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			who = append(who, w...)
		}
		if len(who) > 0 {
			return fmt.Errorf("%d client backends still on the shard databases: %q", len(who), who)
		}
		return nil
	})
}

// dbName is the database a DSN URL names.
func dbName(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || len(u.Path) < 2 {
		t.Fatalf("no database in DSN %q", dsn)
	}
	return u.Path[1:]
}
