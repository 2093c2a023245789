package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// figuresEnv names the rows of the big shard of TestMigrationFigures; the
// test is skipped without it. figuresShardsEnv may lower the shard count
// (2000) for a quick look.
const (
	figuresEnv       = "SHARDKIT_MIGRATE_FIGURES"
	figuresShardsEnv = "SHARDKIT_MIGRATE_FIGURES_SHARDS"
)

// window is the time the load runs before and after each change.
const window = 15 * time.Second

// stats are the requests of a time window.
type stats struct {
	n, failed   int
	p99, max    time.Duration
	reqPerS     float64
	maxOther    time.Duration // longest single-shard request to a shard other than the one excluded
	maxBigWrite time.Duration // longest insert into the shard given
}

func (l *load) between(from, to time.Time, exclude, big int) stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st stats
	var took []time.Duration
	for _, s := range l.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		st.n++
		if s.failed {
			st.failed++
		}
		took = append(took, s.took)
		if s.shard >= 0 && s.shard != exclude {
			st.maxOther = max(st.maxOther, s.took)
		}
		if s.shard == big && s.insert {
			st.maxBigWrite = max(st.maxBigWrite, s.took)
		}
	}
	if len(took) > 0 {
		slices.Sort(took)
		st.p99 = took[(len(took)*99)/100]
		st.max = took[len(took)-1]
	}
	st.reqPerS = float64(st.n) / to.Sub(from).Seconds()
	return st
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// TestMigrationFigures measures migrations under the photo application's
// load (8 workers: inserts, one user's feed, the newest photos of all
// shards) on 2000 shards on two servers, for docs/performance.md:
//
//   - ADD COLUMN … DEFAULT on every shard: wall time, p99 and max request
//     latency in a window before and during, failed requests;
//   - the same interrupted half-way, the application running 15 s with the
//     shards at two versions, then rerun: failed requests;
//   - a change while a transaction holds one shard's table for 60 s:
//     the run's time, its lock timeouts, the longest request to any other
//     shard, requests per second before and during;
//   - CREATE INDEX CONCURRENTLY on every shard, one holding a million rows,
//     against a plain CREATE INDEX: the longest insert into the big shard.
func TestMigrationFigures(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv(figuresEnv))
	if rows <= 0 {
		t.Skipf("set %s=ROWS (the big shard's rows) to take the migration figures", figuresEnv)
	}
	shards := 2000
	if n, _ := strconv.Atoi(os.Getenv(figuresShardsEnv)); n > 0 {
		shards = n
	}
	ctx := context.Background()
	files := map[string]string{}
	version := func(name, sql string) { files[name] = sql }
	cat, servers := provisionTwo(t, shards)
	const big = 3 // user 3's shard, on server a
	began := time.Now()
	seedShard(t, cat, servers[0].DSN, big, rows)
	t.Logf("%d rows in shard %d in %v", rows, big, time.Since(began))

	db := photoDB(t, cat)

	l := newLoad(db, shards)
	l.keep = true
	lctx, endLoad := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() { l.run(lctx, w) })
	}
	// A writer of the big shard alone, so that its inserts are many.
	workers.Go(func() {
		for i := 0; lctx.Err() == nil; i++ {
			t0 := time.Now()
			err := db.WithContext(lctx).Create(&photos.Photo{UserID: big, Caption: fmt.Sprintf("big-%d", i)}).Error
			if lctx.Err() != nil {
				return
			}
			l.record(sample{at: time.Now(), took: time.Since(t0), shard: big, insert: true, failed: err != nil}, err)
		}
	})
	defer func() { endLoad(); workers.Wait() }()
	pause := func(d time.Duration) time.Time {
		time.Sleep(d) // a measurement window: the load runs on its own meanwhile
		return time.Now()
	}
	migrate := func(mctx context.Context, opts migrations.MigrateOptions) (migrations.Summary, time.Time, time.Time, error) {
		from := time.Now()
		sum, err := migrations.MigrateWithSummary(mctx, cat, versionFiles(files), opts)
		return sum, from, time.Now(), err
	}
	write := func(name string, m ...benchout.Metric) {
		t.Helper()
		t.Logf("%s: %v", name, m)
		if err := benchout.Write("MigrateFigures/"+name, m...); err != nil {
			t.Fatal(err)
		}
	}
	pause(5 * time.Second) // warm-up

	// ADD COLUMN … DEFAULT on every shard.
	before := l.between(pause(window).Add(-window), time.Now(), -1, -1)
	version("0002_photos_width.sql", "ALTER TABLE photos ADD COLUMN width integer NOT NULL DEFAULT 0;")
	sum, from, to, err := migrate(ctx, migrations.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	during := l.between(from, to, -1, -1)
	write("add_column", benchout.Metric{Value: to.Sub(from).Seconds(), Unit: "wall-s"},
		benchout.Metric{Value: ms(before.p99), Unit: "p99-before-ms"}, benchout.Metric{Value: ms(during.p99), Unit: "p99-during-ms"},
		benchout.Metric{Value: ms(before.max), Unit: "max-before-ms"}, benchout.Metric{Value: ms(during.max), Unit: "max-during-ms"},
		benchout.Metric{Value: float64(during.failed), Unit: "errors"}, benchout.Metric{Value: float64(during.n), Unit: "requests"},
		benchout.Metric{Value: ms(sum.LongestLockWait), Unit: "lock-wait-ms"}, benchout.Metric{Value: float64(sum.Retries), Unit: "retries"})

	// The same, interrupted half-way; the shards stay at two versions
	// for a window; then the rerun.
	version("0003_photos_height.sql", "ALTER TABLE photos ADD COLUMN height integer NOT NULL DEFAULT 0;")
	mctx, interrupt := context.WithCancel(ctx)
	_, from, _, err = migrate(mctx, migrations.MigrateOptions{Progress: func(p migrations.Progress) {
		if p.Done >= p.Total/2 {
			interrupt()
		}
	}})
	interrupt()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted run: %v", err)
	}
	pause(window)
	sum, _, to, err = migrate(ctx, migrations.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mixed := l.between(from, to, -1, -1)
	write("interrupted", benchout.Metric{Value: float64(mixed.failed), Unit: "errors"}, benchout.Metric{Value: float64(mixed.n), Unit: "requests"},
		benchout.Metric{Value: float64(sum.Schemas), Unit: "rerun-schemas"})

	// A transaction holds one shard's table for 60 s.
	const held = 60 * time.Second
	before = l.between(pause(window).Add(-window), time.Now(), -1, -1)
	holder := pgtest.Connect(t, servers[1].DSN)
	blocked := shards - 1 // on server b
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM shard_%04d.photos", blocked)); err != nil {
		t.Fatal(err)
	}
	release := time.AfterFunc(held, func() { _ = tx.Rollback(ctx) })
	defer release.Stop()
	version("0004_photos_rating.sql", "ALTER TABLE photos ADD COLUMN rating integer NOT NULL DEFAULT 0;")
	sum, from, to, err = migrate(ctx, migrations.MigrateOptions{MaxLockWait: 2 * held})
	if err != nil {
		t.Fatal(err)
	}
	during = l.between(from, to, blocked, -1)
	write("blocked_60s", benchout.Metric{Value: to.Sub(from).Seconds(), Unit: "wall-s"},
		benchout.Metric{Value: float64(sum.Retries), Unit: "retries"}, benchout.Metric{Value: sum.LongestLockWait.Seconds(), Unit: "lock-wait-s"},
		benchout.Metric{Value: ms(during.maxOther), Unit: "max-other-ms"}, benchout.Metric{Value: ms(during.p99), Unit: "p99-during-ms"},
		benchout.Metric{Value: before.reqPerS, Unit: "req/s-before"}, benchout.Metric{Value: during.reqPerS, Unit: "req/s-during"},
		benchout.Metric{Value: float64(during.failed), Unit: "errors"})

	// CREATE INDEX CONCURRENTLY on every shard, the big one included; then
	// a plain CREATE INDEX.
	version("0005_photos_caption.sql", migrations.NoTransactionMarker+"\nCREATE INDEX CONCURRENTLY photos_caption ON photos (caption);")
	sum, from, to, err = migrate(ctx, migrations.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cic := l.between(from, to, -1, big)
	version("0006_photos_caption_user.sql", "CREATE INDEX photos_caption_user ON photos (caption, user_id);")
	_, pfrom, pto, err := migrate(ctx, migrations.MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain := l.between(pfrom, pto, big, big)
	write("index", benchout.Metric{Value: to.Sub(from).Seconds(), Unit: "wall-s"},
		benchout.Metric{Value: ms(cic.maxBigWrite), Unit: "big-write-max-ms"}, benchout.Metric{Value: ms(cic.p99), Unit: "p99-ms"},
		benchout.Metric{Value: float64(cic.failed), Unit: "errors"}, benchout.Metric{Value: float64(sum.Retries), Unit: "retries"},
		benchout.Metric{Value: pto.Sub(pfrom).Seconds(), Unit: "plain-wall-s"},
		benchout.Metric{Value: ms(plain.maxBigWrite), Unit: "plain-big-write-max-ms"}, benchout.Metric{Value: ms(plain.maxOther), Unit: "plain-max-other-ms"})
	endLoad()
	workers.Wait()
	if len(l.errs) > 0 {
		t.Errorf("%d+ requests failed, e.g. %v", len(l.errs), l.errs[0])
	}
}

// sqlSeed inserts rows into a shard's photos with IDs composed in the
// catalog's layout from an hour ago, slot 0's counter running over the
// milliseconds: a million rows in seconds, where next_id() per row takes
// minutes, and never an ID next_id() will issue (it follows the clock).
const sqlSeed = `INSERT INTO %s.photos (id, user_id, caption)
SELECT (($1::bigint + g / $2) << $3) | ($4::bigint << $5) | ((g %% $2) << $6), $4, md5(g::text)
FROM generate_series(0, $7 - 1) g`

func seedShard(t *testing.T, cat *catalog.Catalog, dsn string, shard, rows int) {
	t.Helper()
	snap, err := cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := snap.Layout
	base := time.Now().Add(-time.Hour).UnixMilli() - l.EpochMs
	schema := pgx.Identifier{router.SchemaName(shard)}.Sanitize()
	pgtest.Exec(t, dsn, fmt.Sprintf(sqlSeed, schema), base, int64(1)<<l.CounterBits(),
		int(l.ShardBits+l.SeqBits), shard, int(l.SeqBits), int(l.SlotBits), rows)
	pgtest.Exec(t, dsn, "ANALYZE "+schema+".photos")
}
