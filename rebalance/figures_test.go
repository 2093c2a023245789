package rebalance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
)

// TestMoveFigures measures a move of a large shard with a writer running,
// and compares the copy with pg_dump -n schema | psql. Not part of the
// normal run; make figures runs it, and reads the figures it writes through
// internal/harness/benchout:
//
//	SHARDKIT_MOVE_FIGURES=1000000 go test ./rebalance -run TestMoveFigures -v -timeout 30m
func TestMoveFigures(t *testing.T) {
	rows, _ := strconv.Atoi(os.Getenv("SHARDKIT_MOVE_FIGURES"))
	if rows <= 0 {
		t.Skip("set SHARDKIT_MOVE_FIGURES=<rows> to measure a move")
	}
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shard 0 on s0 (cluster 0), target s1 (cluster 1)
	layout := e.placementLayout(t)
	seedBulkPhotos(t, e, layout, rows)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average before pg_dump | psql: %s", strings.TrimSpace(string(load)))
	}

	// pg_dump -n shard_0000 | psql into a fresh database on the target's cluster.
	dumpTime, dumped := dumpRestore(t, e, layout, 0, 1)
	// The move, with plugin writers on the moving shard and another.
	var steps stepClock
	mv := e.mover(t, Config{hook: steps.hook})
	w := newRawWriter(t, e, []int{0, 2})
	w.via = newPluginOps(t, e, w.r)
	stop := w.run(ctx)
	// The same again with the writer running, as it runs during the move.
	dumpBusy, _ := dumpRestore(t, e, layout, 0, 1)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	total := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	w.check(t)
	if _, err := mv.Verify(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// The copy, the index build and the subscription that then streams
	// from the copy's snapshot: what pg_dump | psql stands for.
	copyTime, indexTime, subTime := steps.took(stepCopiedSnapshot), steps.took(stepIndexes), steps.took(stepSubscribed)
	stepAt := steps.at
	t.Logf("pg_dump -n shard_0000 | psql: %d rows in %v (%.0f rows/s)", dumped, dumpTime.Round(time.Millisecond), float64(dumped)/dumpTime.Seconds())
	t.Logf("move: total %v; copy %v (%.0f rows/s), keys and indexes %v, subscription %v; fenced %v; writer %d ops, %d failed, longest write %v",
		total.Round(time.Millisecond), copyTime.Round(time.Millisecond), float64(rows)/copyTime.Seconds(),
		indexTime.Round(time.Millisecond), subTime.Round(time.Millisecond), m.FencedFor.Round(time.Microsecond), w.ops, len(w.failures), w.maxWait.Round(time.Microsecond))
	t.Logf("longest write overlapping the fenced window: %v", w.longestDuring(stepAt[stepFenced][0], stepAt[stepFlipped][1]).Round(time.Microsecond))
	t.Logf("fenced window %v: %s", m.FencedFor.Round(time.Microsecond), m.Cutover)
	t.Logf("copy+indexes+subscription vs pg_dump|psql: %.2fx the time (copy+indexes %.2fx)",
		(copyTime+indexTime+subTime).Seconds()/dumpTime.Seconds(), (copyTime+indexTime).Seconds()/dumpTime.Seconds())
	t.Logf("pg_dump -n shard_0000 | psql again with the writer running: %v; copy+indexes %.2fx that, with the subscription %.2fx",
		dumpBusy.Round(time.Millisecond), (copyTime+indexTime).Seconds()/dumpBusy.Seconds(), (copyTime+indexTime+subTime).Seconds()/dumpBusy.Seconds())
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the end: %s", strings.TrimSpace(string(load)))
	}
	figure(t, "MoveFigures",
		benchout.Metric{Value: ms(m.FencedFor), Unit: "fenced-ms"},
		benchout.Metric{Value: float64(len(w.failures)), Unit: "failed-writes"},
		benchout.Metric{Value: float64(w.ops), Unit: "writes"},
		benchout.Metric{Value: (copyTime + indexTime).Seconds() / dumpTime.Seconds(), Unit: "x-pg_dump"},
		benchout.Metric{Value: (copyTime + indexTime).Seconds() / dumpBusy.Seconds(), Unit: "x-pg_dump-busy"},
		benchout.Metric{Value: total.Seconds(), Unit: "move-s"})
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// figure writes a figure of a test for make figures (a no-op unless
// SHARDKIT_FIGURES_OUT is set).
func figure(t testing.TB, name string, metrics ...benchout.Metric) {
	t.Helper()
	if err := benchout.Write(name, metrics...); err != nil {
		t.Error(err)
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// seedBulkPhotos loads rows photos into shard 0 on s0: IDs in shard 0's
// layout, times in the past minutes, captions of about 60 bytes, like a
// photo row; then VACUUM ANALYZE.
func seedBulkPhotos(t testing.TB, e *env, layout idgen.Layout, rows int) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	_, err := e.pools["s0"].Exec(ctx, `INSERT INTO shard_0000.photos (id, user_id, caption, version, created_at)
		SELECT ((($1::bigint - $2::bigint - 600000) + g / 1024) << $3::int) | (g % 1024),
		       (g % 5000) * 4, 'bulk ' || g || ' photo taken somewhere nice, with a caption of some length', 0, now()
		FROM generate_series(1, $4::int) AS g`,
		time.Now().UnixMilli(), layout.EpochMs, int(layout.ShardBits+layout.SeqBits), rows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pools["s0"].Exec(ctx, `VACUUM ANALYZE shard_0000.photos`); err != nil {
		t.Fatal(err)
	}
	var heap int64
	if err := e.pools["s0"].QueryRow(ctx, `SELECT pg_total_relation_size('shard_0000.photos')`).Scan(&heap); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d rows (%.1f MB with indexes) in %v", rows, float64(heap)/1e6, time.Since(start).Round(time.Millisecond))
}

// stepClock records when a mover's hook saw each step begin and end.
type stepClock struct {
	mu sync.Mutex
	at map[Step][2]time.Time
}

func (c *stepClock) hook(_ Move, s Step, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[Step][2]time.Time{}
	}
	at := c.at[s]
	if done {
		at[1] = time.Now()
	} else {
		at[0] = time.Now()
	}
	c.at[s] = at
}

// took is how long step s took the last time it ran.
func (c *stepClock) took(s Step) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[s][1].Sub(c.at[s][0])
}

// dumpRestore runs pg_dump -n shard_0000 of the database on cluster `from`
// (s0 or s1 of e) into a fresh database on cluster `into`, and returns how
// long it took and how many photos arrived.
func dumpRestore(t testing.TB, e *env, layout idgen.Layout, from, into int) (time.Duration, int64) {
	t.Helper()
	ctx := context.Background()
	dumpDB := pgtest.NewDatabase(t, into)
	if err := shardschema.EnsureServer(ctx, mustConn(t, dumpDB), layout); err != nil {
		t.Fatal(err)
	}
	bin, err := pglocal.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("%s -n shard_0000 '%s' | %s -q -v ON_ERROR_STOP=0 '%s' >/dev/null 2>&1",
		filepath.Join(bin, "pg_dump"), e.servers[from].DSN, filepath.Join(bin, "psql"), dumpDB))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_dump | psql: %v\n%s", err, out)
	}
	took := time.Since(start)
	var dumped int64
	if err := mustConn(t, dumpDB).QueryRow(ctx, `SELECT count(*) FROM shard_0000.photos`).Scan(&dumped); err != nil {
		t.Fatal(err)
	}
	return took, dumped
}

func (e *env) placementLayout(t testing.TB) idgen.Layout {
	t.Helper()
	snap, err := e.cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap.Layout
}

func mustConn(t testing.TB, dsn string) *pgx.Conn { return pgtest.Connect(t, dsn) }
