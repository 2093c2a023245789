package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// loadShards is the shard count of the test: few, so that it stays fast.
const loadShards = 40

// versionFiles is the shared photos schema plus the given files.
func versionFiles(extra map[string]string) photos.FS {
	fsys := fstest.MapFS{}
	for name, sql := range extra {
		fsys[name] = &fstest.MapFile{Data: []byte(sql)}
	}
	return photos.With(fsys)
}

// load is the application under test: workers that insert, read one
// user's feed and read the newest photos of all shards, counting errors
// and the longest single-shard request per shard, and keeping every
// request's time when keep is set (for figures).
type load struct {
	db      *gorm.DB
	shards  int // users 1..shards, one per shard
	keep    bool
	ops     atomic.Int64
	mu      sync.Mutex
	errs    []error
	slowest map[int]time.Duration
	samples []sample
}

// sample is one request: when it ended, how long it took, the shard it
// went to (-1 for a read of all shards), and whether it failed.
type sample struct {
	at     time.Time
	took   time.Duration
	shard  int
	insert bool
	failed bool
}

func newLoad(db *gorm.DB, shards int) *load {
	return &load{db: db, shards: shards, slowest: map[int]time.Duration{}}
}

func (l *load) run(ctx context.Context, worker int) {
	for i := 0; ctx.Err() == nil; i++ {
		user := int64(1 + (worker*7919+i*31)%l.shards) // 1..shards: a zero key reads as none
		shard := int(user) % l.shards
		db := l.db.WithContext(ctx)
		began := time.Now()
		var err error
		switch i % 3 {
		case 0:
			err = db.Create(&photos.Photo{UserID: user, Caption: fmt.Sprintf("w%d-%d", worker, i)}).Error
		case 1:
			var feed []photos.Photo
			err = db.Where("user_id = ?", user).Order("id DESC").Limit(10).Find(&feed).Error
		default:
			shard = -1
			var newest []photos.Photo
			err = db.Clauses(plugin.AllShards()).Order("id DESC").Limit(20).Find(&newest).Error
		}
		took := time.Since(began)
		if ctx.Err() != nil {
			return // the test's own end, not a failure
		}
		l.record(sample{at: time.Now(), took: took, shard: shard, insert: i%3 == 0, failed: err != nil}, err)
	}
}

func (l *load) record(s sample, err error) {
	l.ops.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && len(l.errs) < 20 {
		l.errs = append(l.errs, err)
	} else if err != nil {
		l.errs = append(l.errs[:19], err)
	}
	if s.shard >= 0 {
		l.slowest[s.shard] = max(l.slowest[s.shard], s.took)
	}
	if l.keep {
		l.samples = append(l.samples, s)
	}
}

// resetSlowest forgets the slowest requests per shard, and returns the
// slowest of them.
func (l *load) resetSlowest() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var most time.Duration
	for _, d := range l.slowest {
		most = max(most, d)
	}
	l.slowest = map[int]time.Duration{}
	return most
}

// waitOps waits until the workers have done n more requests, or a minute.
func (l *load) waitOps(n int64) error {
	target := l.ops.Load() + n
	for deadline := time.Now().Add(time.Minute); l.ops.Load() < target; {
		if time.Now().After(deadline) {
			return fmt.Errorf("the load did %d requests in a minute, want %d", l.ops.Load()-target+n, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter
	}
	return nil
}

// TestAddColumnUnderLoad: the photo application keeps reading and writing
// while ADD COLUMN … DEFAULT runs on every shard, while the run is
// interrupted half-way (the shards of one server at two schema versions
// for as long as it takes the application to make a few hundred
// requests) and resumed, and while a second change waits out a
// transaction holding one shard's table: no request fails, and no request
// to another shard waits anything like the migration's lock waits.
func TestAddColumnUnderLoad(t *testing.T) {
	ctx := context.Background()
	cat, servers := provisionTwo(t, loadShards)
	db := photoDB(t, cat)

	l := newLoad(db, loadShards)
	lctx, endLoad := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() { l.run(lctx, w) })
	}
	defer func() { endLoad(); workers.Wait() }()
	if err := l.waitOps(100); err != nil {
		t.Fatal(err)
	}

	// ADD COLUMN … DEFAULT, interrupted half-way; the application runs on
	// with the shards at two versions; then the rerun finishes.
	width := versionFiles(map[string]string{"0002_photos_width.sql": "ALTER TABLE photos ADD COLUMN width integer NOT NULL DEFAULT 0;"})
	mctx, interrupt := context.WithCancel(ctx)
	err := migrations.Migrate(mctx, cat, width, migrations.MigrateOptions{Progress: func(p migrations.Progress) {
		if p.Done >= loadShards/2 {
			interrupt()
		}
	}})
	interrupt()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted run: err = %v, want context.Canceled", err)
	}
	if err := l.waitOps(300); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Migrate(ctx, cat, width, migrations.MigrateOptions{}); err != nil {
		t.Fatalf("the rerun: %v", err)
	}
	if err := l.waitOps(100); err != nil {
		t.Fatal(err)
	}
	// What this machine makes a one-shard request wait with no change
	// under way: the bound below is over it. Under a loaded test run a
	// request waited 3.4 s with nothing of the migration in its way.
	l.resetSlowest()
	if err := l.waitOps(300); err != nil {
		t.Fatal(err)
	}
	machine := l.resetSlowest()

	// A second change while a transaction holds shard 7's table: the
	// schema is retried until the holder ends; the others do not wait.
	const blocked = 7
	holder := pgtest.Connect(t, servers[0].DSN)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM shard_%04d.photos", blocked)); err != nil {
		t.Fatal(err)
	}
	height := versionFiles(map[string]string{
		"0002_photos_width.sql":  "ALTER TABLE photos ADD COLUMN width integer NOT NULL DEFAULT 0;",
		"0003_photos_height.sql": "ALTER TABLE photos ADD COLUMN height integer NOT NULL DEFAULT 0;",
	})
	const lockTimeout = 300 * time.Millisecond
	sum, err := migrations.MigrateWithSummary(ctx, cat, height, migrations.MigrateOptions{LockTimeout: lockTimeout, RetryBase: 50 * time.Millisecond,
		Progress: func(p migrations.Progress) {
			if p.Wait != nil && p.Wait.Attempts == 3 {
				_ = l.waitOps(100) // requests beside the waiting ALTER; checked below either way
				_ = tx.Rollback(ctx)
			}
		}})
	if err != nil {
		t.Fatalf("the change beside a blocker: %v", err)
	}
	if err := l.waitOps(100); err != nil {
		t.Fatal(err)
	}
	endLoad()
	workers.Wait()
	t.Logf("%d requests; the second change: %+v; the slowest request before it: %v", l.ops.Load(), sum, machine)
	if len(l.errs) > 0 {
		t.Fatalf("%d+ requests failed during the migrations, e.g. %v", len(l.errs), l.errs[0])
	}
	if sum.Retries < 3 || sum.LongestLockSchema != fmt.Sprintf("shard_%04d", blocked) {
		t.Fatalf("the second change: %+v; want at least 3 lock timeouts on shard %d", sum, blocked)
	}
	// A request to another shard never queues behind the blocked ALTER: its
	// time is the machine's, not the lock's. The bound is ten lock timeouts
	// over the slowest request the same load saw just before, with no
	// change under way.
	bound := 10*lockTimeout + machine
	for shard, d := range l.slowest {
		if shard != blocked && d > bound {
			t.Errorf("a request to shard %d took %v; want under %v (the slowest before the change: %v)", shard, d, bound, machine)
		}
	}
}

// photoDB is the photo application's GORM: the plugin for photo on the
// catalog's servers, following its map, with IDs from a leased slot.
func photoDB(t *testing.T, cat *catalog.Catalog) *gorm.DB {
	t.Helper()
	ctx := context.Background()
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	gen := shardtest.Generator(t, cat)
	db, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 1)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	p := plugin.Register(plugin.Config{Router: r, IDs: gen}, &photos.Photo{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return db
}

// provisionTwo provisions shards on two servers, one on each test
// cluster, with the shared photos schema, and returns their catalog.
func provisionTwo(t *testing.T, shards int) (*catalog.Catalog, []migrations.ServerSpec) {
	t.Helper()
	e := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: shards})
	return e.Catalog, e.Servers
}
