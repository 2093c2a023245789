package rebalance

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/catalog"
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
// completing the others. Porcupine then checks the history per key.

type regKind int

const (
	regRead regKind = iota
	regWrite
	regCAS
)

type regInput struct {
	kind     regKind
	key      int
	arg, old int // write: arg; cas: old → arg
}

type regOutput struct {
	value   int  // read: the value read
	ok      bool // cas: applied
	unknown bool // write or cas that failed: it may or may not have taken effect
}

// regMeta is where an operation went, for the report of a violation.
type regMeta struct {
	client        int
	server        string // the server the router's map placed the key's shard on at the call
	before, after int64  // the router's map version at the call and at the return
	err           string // the error of an unknown outcome
	shard         int
}

// registerModel is a linearizable register per key; an unknown outcome
// may or may not have been applied.
var registerModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(regInput).key
			by[k] = append(by[k], op)
		}
		keys := make([]int, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{0} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int), input.(regInput), output.(regOutput)
		switch in.kind {
		case regRead:
			if out.value == s {
				return []any{s}
			}
			return nil
		case regWrite:
			if out.unknown {
				return []any{s, in.arg}
			}
			return []any{in.arg}
		default:
			switch {
			case out.unknown && s == in.old:
				return []any{s, in.arg}
			case out.unknown:
				return []any{s}
			case out.ok && s == in.old:
				return []any{in.arg}
			case !out.ok && s != in.old:
				return []any{s}
			}
			return nil
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch {
		case in.kind == regRead:
			return fmt.Sprintf("read(k%d) → %d", in.key, out.value)
		case in.kind == regWrite && out.unknown:
			return fmt.Sprintf("write(k%d, %d) → unknown", in.key, in.arg)
		case in.kind == regWrite:
			return fmt.Sprintf("write(k%d, %d) → ok", in.key, in.arg)
		case out.unknown:
			return fmt.Sprintf("cas(k%d, %d→%d) → unknown", in.key, in.old, in.arg)
		}
		return fmt.Sprintf("cas(k%d, %d→%d) → %v", in.key, in.old, in.arg, out.ok)
	},
}

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
	mu     sync.Mutex
	ops    []porcupine.Operation
	moves  []moveEvent
	start  time.Time
	next   atomic.Int64 // values written are unique
	missed atomic.Int64 // writes acknowledged with no row updated
	last   []atomic.Int64
}

func (h *historyRun) record(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *historyRun) now() int64 { return int64(time.Since(h.start)) }

// one runs one random operation of client c on key k.
func (h *historyRun) one(ctx context.Context, c *historyClient, rng *rand.Rand, ki int, k historyKey) {
	meta := regMeta{client: c.id, shard: k.shard, before: c.r.Snapshot().Version}
	if pl, err := c.r.Snapshot().Placement(k.shard); err == nil {
		meta.server = pl.Server
	}
	in := regInput{key: ki}
	var out regOutput
	call := h.now()
	var err error
	switch p := rng.IntN(10); {
	case p < 5:
		in.kind = regRead
		var ph photos.Photo
		err = c.db.WithContext(ctx).Where("user_id = ? AND id = ?", k.user, k.id).Take(&ph).Error
		out.value = ph.Version
	case p < 8:
		in.kind, in.arg = regWrite, int(h.next.Add(1))
		res := c.db.WithContext(ctx).Model(&photos.Photo{ID: k.id, UserID: k.user}).Update("version", in.arg)
		err = res.Error
		if err == nil && res.RowsAffected != 1 {
			// The row exists on the shard's home: a write that found none
			// ran elsewhere, and its success is a lie.
			h.missed.Add(1)
			meta.err = fmt.Sprintf("acknowledged, %d rows updated", res.RowsAffected)
		}
	default:
		in.kind, in.arg, in.old = regCAS, int(h.next.Add(1)), int(h.last[ki].Load())
		res := c.db.WithContext(ctx).Model(&photos.Photo{ID: k.id, UserID: k.user}).Where("version = ?", in.old).Update("version", in.arg)
		err, out.ok = res.Error, res.RowsAffected == 1
	}
	ret := h.now()
	meta.after = c.r.Snapshot().Version
	if err != nil {
		if in.kind == regRead {
			return // a failed read has no effect
		}
		// A write that failed, the end of the run cutting it short
		// included, may have committed all the same.
		out.unknown, ret, meta.err = true, math.MaxInt64, err.Error()
	}
	if in.kind == regRead && err == nil {
		h.last[ki].Store(int64(out.value))
	}
	h.record(porcupine.Operation{ClientId: c.id, Input: in, Call: call, Output: out, Return: ret, Metadata: meta})
}

// moveEvent is a change of the map the mover made, for a violation's report.
type moveEvent struct {
	at   int64
	what string
}

func (h *historyRun) moved(format string, args ...any) {
	h.mu.Lock()
	h.moves = append(h.moves, moveEvent{at: h.now(), what: fmt.Sprintf(format, args...)})
	h.mu.Unlock()
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
	h := &historyRun{start: time.Now(), last: make([]atomic.Int64, spec.keys)}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c.id), uint64(time.Now().UnixNano())))
			for runCtx.Err() == nil {
				ki := rng.IntN(len(keys))
				h.one(runCtx, c, rng, ki, keys[ki])
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
		h.moved("move shard %d %s → %s starts", shard, from, to)
		m, err := mv.Move(ctx, shard, to, MoveOptions{})
		if err != nil {
			moveErr = fmt.Errorf("move shard %d to %s: %w", shard, to, err)
			break
		}
		h.moved("move shard %d %s → %s cut over (fenced %v)", shard, from, to, m.FencedFor.Round(time.Millisecond))
		res.moves++
		// Rolled back once the rollbacks so far fall short of the share.
		if float64(res.rollbacks) < spec.rollback*float64(res.moves) {
			res.rollbacks++
			_, moveErr = mv.Rollback(ctx, shard)
			h.moved("move shard %d rolled back to %s", shard, from)
		} else {
			_, moveErr = mv.Complete(ctx, shard)
			h.moved("move shard %d completed on %s", shard, to)
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
		call := h.now()
		var v int
		if err := e.pools[p.Server].QueryRow(ctx, `SELECT version FROM `+ident(p.Schema, "photos")+` WHERE id = $1`, k.id).Scan(&v); err != nil {
			t.Fatal(err)
		}
		h.record(porcupine.Operation{ClientId: spec.clients, Input: regInput{kind: regRead, key: ki}, Call: call,
			Output: regOutput{value: v}, Return: h.now(), Metadata: regMeta{client: -1, server: p.Server, shard: k.shard}})
	}
	res.ops = len(h.ops)
	for _, op := range h.ops {
		if op.Output.(regOutput).unknown {
			res.unknown++
		}
	}
	res.missed = h.missed.Load()
	res.violations = checkHistory(t, h.ops)
	if len(res.violations) > 0 {
		for _, mv := range h.moves {
			t.Logf("%v  %s", time.Duration(mv.at).Round(time.Millisecond), mv.what)
		}
	}
	return res
}

// checkHistory checks each key's history with porcupine and returns, for
// each key that is not linearizable, its smallest failing window.
func checkHistory(t *testing.T, ops []porcupine.Operation) []string {
	t.Helper()
	model := registerModel.ToModel()
	var out []string
	for _, part := range model.Partition(ops) {
		r := porcupine.CheckOperationsTimeout(model, part, time.Minute)
		if r == porcupine.Unknown {
			t.Errorf("key %d: the check timed out (%d operations)", part[0].Input.(regInput).key, len(part))
			continue
		}
		if r == porcupine.Ok {
			continue
		}
		out = append(out, smallestWindow(model, part))
	}
	return out
}

// smallestWindow finds the earliest operation whose call makes the key's
// history (the operations called up to it) non-linearizable, and prints
// it with the operations on the key around it: who read what, from which
// server, at which map version.
func smallestWindow(model porcupine.Model, part []porcupine.Operation) string {
	sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
	lo, hi := 1, len(part) // the prefix of length hi is illegal
	for lo < hi {
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(model, part[:mid], 10*time.Second) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	bad := part[hi-1]
	var b strings.Builder
	fmt.Fprintf(&b, "key %d is not linearizable; the first operation that cannot be placed:\n", bad.Input.(regInput).key)
	// The operations that overlap the failing one or returned in the
	// 30 ms before its call, at most the last 16 of them.
	from := bad.Call - int64(30*time.Millisecond)
	var window []porcupine.Operation
	for _, op := range part[:hi] {
		if op.Return >= from {
			window = append(window, op)
		}
	}
	if m := bad.Metadata.(regMeta); m.client == -1 {
		// The final state: the last writes acknowledged before it.
		window = window[:0]
		for _, op := range part[:hi] {
			if in := op.Input.(regInput); in.kind != regRead && op.Return != math.MaxInt64 {
				window = append(window, op)
			}
		}
		window = append(window, bad)
	}
	window = window[max(len(window)-16, 0):]
	for _, op := range window {
		mark := "  "
		if op.Call == bad.Call && op.ClientId == bad.ClientId {
			mark = "=>"
		}
		m := op.Metadata.(regMeta)
		ret := "never"
		if op.Return != math.MaxInt64 {
			ret = time.Duration(op.Return).Round(time.Microsecond).String()
		}
		fmt.Fprintf(&b, "%s client %d  %-34s  call %v  return %v  server %s  map v%d→v%d  shard %d %s\n", mark, m.client,
			model.DescribeOperation(op.Input, op.Output), time.Duration(op.Call).Round(time.Microsecond), ret, m.server, m.before, m.after, m.shard, m.err)
	}
	return b.String()
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
