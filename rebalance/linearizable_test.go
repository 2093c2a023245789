package rebalance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/linearize"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// The history test's workload: each key is one photo row, its version
// column a register. Reads, writes and compare-and-sets go through the
// plugin of one of several independent routers (each its own catalog
// pool and poll interval, as separate app processes are) while a mover
// moves the keys' shards back and forth, rolling some moves back and
// completing the others. Porcupine then checks the history per key
// (internal/harness/linearize).

// historyKey is one register: a photo of a user whose shard moves.
type historyKey struct {
	user, id int64
	shard    int
}

// historyClient is one app process: its own catalog pool, router (polling
// at its own interval) and plugin.
type historyClient struct {
	id   int
	r    *router.Router
	db   *gorm.DB
	poll time.Duration
}

type historyRun struct {
	*linearize.History
	missed atomic.Int64 // writes acknowledged with no row updated
}

// one runs one random operation of client c on key k.
func (h *historyRun) one(ctx context.Context, c *historyClient, rng *rand.Rand, ki int, k historyKey) {
	meta := linearize.Meta{Client: c.id, Shard: k.shard, Before: c.r.Snapshot().Version}
	if pl, err := c.r.Snapshot().Placement(k.shard); err == nil {
		meta.Server = pl.Server
	}
	in := linearize.Input{Key: ki}
	var out linearize.Output
	switch p := rng.IntN(10); {
	case p < 5:
		in.Kind = linearize.Read
	case p < 8:
		in.Kind, in.Arg = linearize.Write, h.Value()
	default:
		in.Kind, in.Arg, in.Old = linearize.CAS, h.Value(), h.Last(ki)
	}
	op := h.Call(in, meta)
	var err error
	switch in.Kind {
	case linearize.Read:
		var ph photos.Photo
		err = c.db.WithContext(ctx).Where("user_id = ? AND id = ?", k.user, k.id).Take(&ph).Error
		out.Value = ph.Version
	case linearize.Write:
		res := c.db.WithContext(ctx).Model(&photos.Photo{ID: k.id, UserID: k.user}).Update("version", in.Arg)
		err = res.Error
		if err == nil && res.RowsAffected != 1 {
			// The row exists on the shard's home: a write that found none
			// ran elsewhere, and its success is a lie.
			h.missed.Add(1)
			op.Meta.Err = fmt.Sprintf("acknowledged, %d rows updated", res.RowsAffected)
		}
	default:
		res := c.db.WithContext(ctx).Model(&photos.Photo{ID: k.id, UserID: k.user}).Where("version = ?", in.Old).Update("version", in.Arg)
		err, out.OK = res.Error, res.RowsAffected == 1
	}
	op.Meta.After = c.r.Snapshot().Version
	// A write that failed, the end of the run cutting it short included,
	// may have committed all the same: Return records it as unknown.
	op.Return(out, err)
}

// historySpec is the shape of one run.
type historySpec struct {
	clients  int
	keys     int
	duration time.Duration
	minMoves int
	rollback float64 // share of moves rolled back, spread evenly
}

type historyResult struct {
	ops, unknown, moves, rollbacks int
	missed                         int64 // writes acknowledged that updated no row
	violations                     []string
}

// clientPace and maxHistory bound a history's size, and with it what
// porcupine needs to check it: unpaced, six clients recorded about 60,000
// operations a second, and a run that a loaded machine stretched until
// its moves were done grew past what the checker can hold in memory (the
// test binary was killed for it). Paced, a client still reads and writes
// hundreds of times within a router's poll interval, the window in which
// a stale map would read the old home.
const (
	clientPace = 2 * time.Millisecond
	maxHistory = 300_000
)

// runHistory runs the workload and checks it.
func runHistory(t *testing.T, e *env, spec historySpec, client func(i int) *historyClient) historyResult {
	t.Helper()
	ctx := context.Background()
	keys := make([]historyKey, spec.keys)
	for i := range keys {
		shard := i % e.shards
		user := int64(shard + e.shards*(i/e.shards+1))
		p := e.placement(t, shard)
		var id int64
		if err := e.pools[p.Server].QueryRow(ctx, `INSERT INTO `+ident(p.Schema, "photos")+` (user_id, caption) VALUES ($1, 'register') RETURNING id`, user).Scan(&id); err != nil {
			t.Fatal(err)
		}
		keys[i] = historyKey{user: user, id: id, shard: shard}
	}
	clients := make([]*historyClient, spec.clients)
	for i := range clients {
		clients[i] = client(i)
	}
	h := &historyRun{History: linearize.New()}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c.id), uint64(time.Now().UnixNano())))
			for runCtx.Err() == nil && h.Len() < maxHistory {
				ki := rng.IntN(len(keys))
				h.one(runCtx, c, rng, ki, keys[ki])
				time.Sleep(clientPace) // pace, not synchronisation
			}
		})
	}
	var res historyResult
	mv := e.mover(t, Config{})
	deadline := time.Now().Add(spec.duration)
	var moveErr error
	for shard := 0; moveErr == nil && (time.Now().Before(deadline) || res.moves < spec.minMoves); shard = (shard + 1) % e.shards {
		from := e.placement(t, shard).Server
		to := "s0"
		if from == "s0" {
			to = "s1"
		}
		h.Note("move shard %d %s → %s starts", shard, from, to)
		m, err := mv.Move(ctx, shard, to, MoveOptions{})
		if err != nil {
			moveErr = fmt.Errorf("move shard %d to %s: %w", shard, to, err)
			break
		}
		h.Note("move shard %d %s → %s cut over (fenced %v)", shard, from, to, m.FencedFor.Round(time.Millisecond))
		res.moves++
		// Rolled back once the rollbacks so far fall short of the share.
		if float64(res.rollbacks) < spec.rollback*float64(res.moves) {
			res.rollbacks++
			_, moveErr = mv.Rollback(ctx, shard)
			h.Note("move shard %d rolled back to %s", shard, from)
		} else {
			_, moveErr = mv.Complete(ctx, shard)
			h.Note("move shard %d completed on %s", shard, to)
		}
	}
	// Some traffic after the last change, so that every router has
	// polled past it.
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	if moveErr != nil {
		t.Fatal(moveErr)
	}
	// The final state, read on each key's home by the operator: every
	// acknowledged write must be part of it.
	for ki, k := range keys {
		p := e.placement(t, k.shard)
		var v int
		if err := e.pools[p.Server].QueryRow(ctx, `SELECT version FROM `+ident(p.Schema, "photos")+` WHERE id = $1`, k.id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		h.Final(spec.clients, ki, v, linearize.Meta{Server: p.Server, Shard: k.shard})
	}
	res.ops, res.unknown = h.Stats()
	if res.ops >= maxHistory {
		t.Logf("the clients stopped at %d operations (maxHistory), before the last move ended", res.ops)
	}
	res.missed = h.missed.Load()
	res.violations = h.Check(t)
	return res
}

// historyLong reports whether the long variant runs.
func historyLong() bool { return os.Getenv("SHARDKIT_RELIABILITY") != "" }

// pollingClients makes clients that each open their own catalog pool
// with dsn and poll it at an interval between 50 ms and 1 s.
func pollingClients(t *testing.T, e *env, dsn string) func(i int) *historyClient {
	return func(i int) *historyClient {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		r, err := router.New(ctx, cat)
		if err != nil {
			t.Fatal(err)
		}
		polls := []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond, 800 * time.Millisecond, time.Second}
		poll := polls[i%len(polls)]
		done := make(chan struct{})
		go func() { defer close(done); _ = r.WatchWith(ctx, router.WatchOptions{Poll: poll}) }()
		db := newPluginDB(t, e, r, plugin.Config{}, &photos.Photo{})
		t.Cleanup(func() { cancel(); <-done; cat.Close() })
		return &historyClient{id: i, r: r, db: db, poll: poll}
	}
}

// TestReadsLinearizableAcrossMoves: six app processes, each with its own
// polling router, read, write and compare-and-set twelve rows while their
// shards move, roll back and complete; the history is linearizable per
// row. A router that has not yet seen a flip must not read the shard's
// old home. Short here (shorter with -short); SHARDKIT_RELIABILITY=1
// runs it for 90 s and at least ten moves.
func TestReadsLinearizableAcrossMoves(t *testing.T) {
	e := newAppEnv(t, 2, 2, 4)
	spec := historySpec{clients: 6, keys: 12, duration: 10 * time.Second, minMoves: 3, rollback: 0.4}
	switch {
	case historyLong():
		spec.duration, spec.minMoves = 90*time.Second, 10
	case testing.Short(): // make test's race stage: the routers' and the plugin's concurrency, briefly
		spec.duration, spec.minMoves = 5*time.Second, 2
	}
	res := runHistory(t, e, spec, pollingClients(t, e, shardtest.AppDSN(t, e.catalogDSN)))
	t.Logf("%d operations (%d unknown outcomes), %d moves (%d rolled back), %d keys not linearizable, %d writes acknowledged that updated no row",
		res.ops, res.unknown, res.moves, res.rollbacks, len(res.violations), res.missed)
	if res.missed > 0 {
		t.Errorf("%d writes were acknowledged without updating their row", res.missed)
	}
	for _, v := range res.violations {
		t.Error(v)
	}
}
