package catalog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// reliabilityEnv turns on the long reliability tests (`make reliability`).
const reliabilityEnv = "SHARDKIT_RELIABILITY"

// Settings of a "chaos" child.
const (
	chaosLeaseTTL      = 3 * time.Second
	chaosMaxRegression = 200 * time.Millisecond // the generator's limit: larger steps fail
	chaosMaxStep       = 500 * time.Millisecond // below the lease margin (TTL/5 = 600 ms)
)

// steppingClock is the system clock with backward steps injected: in one
// 250 ms window of five (chosen by a per-process hash), the clock reads up
// to chaosMaxStep behind for the window's first 100 ms. Steps under the
// generator's MaxClockRegression are waited out; larger ones fail with
// ErrClockMovedBackwards. The step moves the monotonic reading as well, so
// lease deadlines look later by as much: chaosMaxStep stays below the
// lease margin, as the margin's documentation requires of clock errors.
type steppingClock struct {
	start time.Time
	seed  maphash.Seed
}

func (c steppingClock) Now() time.Time {
	t := time.Now()
	since := t.Sub(c.start)
	window := uint64(since / (250 * time.Millisecond))
	h := maphash.Comparable(c.seed, window)
	if h%5 != 0 || since%(250*time.Millisecond) >= 100*time.Millisecond {
		return t
	}
	return t.Add(-time.Duration((h >> 8) % uint64(chaosMaxStep)))
}

func (c steppingClock) Sleep(ctx context.Context, d time.Duration) error {
	return idgen.SystemClock().Sleep(ctx, d)
}

// runChaosChild issues count IDs for childShard on a clock with backward
// steps, writing each batch to the output file as it goes (unbuffered, so
// a SIGKILL loses at most the batch being issued, never a written one).
func runChaosChild(ctx context.Context, cat *Catalog, f *os.File, count int) error {
	var clockErrs, leaseWaits int
	defer func() { // what the child went through, for the parent's log
		_ = os.WriteFile(f.Name()+".stats", fmt.Appendf(nil, "%d %d", clockErrs, leaseWaits), 0o644)
	}()
	clock := steppingClock{start: time.Now(), seed: maphash.MakeSeed()}
	var g *idgen.Generator
	for {
		var err error
		g, _, err = StartGenerator(ctx, cat, LeaserConfig{TTL: chaosLeaseTTL},
			idgen.Config{Clock: clock, MaxClockRegression: chaosMaxRegression})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoFreeSlot) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	batch := make([]int64, 64)
	buf := make([]byte, 8*len(batch))
	for written := 0; written < count; {
		err := g.Fill(ctx, childShard, batch)
		if errors.Is(err, idgen.ErrLeaseExpired) || errors.Is(err, idgen.ErrClockMovedBackwards) {
			if errors.Is(err, idgen.ErrClockMovedBackwards) {
				clockErrs++
			} else {
				leaseWaits++
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		for i, id := range batch {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
		}
		if _, err := f.Write(buf); err != nil {
			return err
		}
		written += len(batch)
	}
	return g.Close(ctx)
}

// TestReliabilityIDs is the long uniqueness test of `make reliability`:
// eight processes issue 1,000,000 IDs each for the same logical shard,
// sharing seven slots (3 slot bits), on clocks that step back by up to
// 500 ms, while one process in eight is SIGKILLed every two seconds and
// replaced by one that issues what it had left. Every ID written by any
// process is checked: the right shard, a leased slot, no duplicate.
//
//	SHARDKIT_RELIABILITY=1 go test ./router -run TestReliabilityIDs -v -timeout 60m
func TestReliabilityIDs(t *testing.T) {
	if os.Getenv(reliabilityEnv) == "" {
		t.Skip("a long run: set " + reliabilityEnv + "=1 (make reliability)")
	}
	procs, each := 8, 1_000_000
	if n, err := strconv.Atoi(os.Getenv("SHARDKIT_RELIABILITY_IDS")); err == nil && n > 0 {
		each = n
	}
	layout := layoutWithSlots(3)
	_, dsn := seedCatalog(t, 8, layout)
	dir := t.TempDir()
	start := time.Now()

	type lane struct {
		child   *testkit.Child
		running bool
		files   []string
	}
	type exit struct {
		lane, incarnation int
		err               error
	}
	exits := make(chan exit, procs)
	lanes := make([]*lane, procs)
	spawn := func(i, count int) {
		l := lanes[i]
		out := filepath.Join(dir, fmt.Sprintf("%d-%d", i, len(l.files)))
		l.files = append(l.files, out)
		l.child, l.running = startChild(t, "chaos", dsn, out, count), true
		go func(c *testkit.Child, n int) { exits <- exit{i, n, c.Wait()} }(l.child, len(l.files))
	}
	written := func(l *lane) int { // IDs in the lane's files so far
		n := 0
		for _, f := range l.files {
			if fi, err := os.Stat(f); err == nil {
				n += int(fi.Size() / 8)
			}
		}
		return n
	}
	for i := range lanes {
		lanes[i] = &lane{}
		spawn(i, each)
	}
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	kills := 0
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for running := procs; running > 0; {
		select {
		case <-tick.C: // kill one running process; its lane goes on when it has exited
			if l := lanes[rng.IntN(procs)]; l.running {
				l.child.Kill() // its exit comes on exits
			}
		case e := <-exits:
			l := lanes[e.lane]
			if e.incarnation != len(l.files) {
				continue
			}
			l.running = false
			switch {
			case e.err == nil:
				running--
			case testkit.Killed(e.err):
				kills++
				if left := each - written(l); left > 0 {
					spawn(e.lane, left)
				} else {
					running--
				}
			default:
				t.Fatalf("chaos child of lane %d: %v", e.lane, e.err)
			}
		}
	}
	elapsed := time.Since(start)

	var all []int64
	slots := map[int]int{}
	clockErrs, leaseWaits := 0, 0
	for i, l := range lanes {
		n := 0
		for _, f := range l.files {
			var c, w int
			if b, err := os.ReadFile(f + ".stats"); err == nil { // a killed child writes none
				if _, err := fmt.Sscan(string(b), &c, &w); err == nil {
					clockErrs, leaseWaits = clockErrs+c, leaseWaits+w
				}
			}
			ids := readIDs(t, f)
			for _, id := range ids {
				p, err := layout.Decode(id)
				if err != nil || p.Shard != childShard || p.Slot == 0 || p.UnixMs > time.Now().UnixMilli()+int64(idgen.DefaultMaxBorrow/time.Millisecond)+1000 {
					t.Fatalf("lane %d: ID %d decodes to %+v, %v", i, id, p, err)
				}
				slots[p.Slot]++
			}
			n += len(ids)
			all = append(all, ids...)
		}
		if n < each {
			t.Fatalf("lane %d wrote %d IDs, want at least %d", i, n, each)
		}
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate ID %d (%+v)", all[i], must(layout.Decode(all[i])))
		}
	}
	t.Logf("%d IDs for shard %d from %d processes (%d SIGKILLed and replaced) on clocks stepping back up to %v, in %v: no duplicates; "+
		"clock steps refused %d times and leases lapsed %d times in the processes that finished; IDs per slot %v",
		len(all), childShard, procs, kills, chaosMaxStep, elapsed.Round(time.Second), clockErrs, leaseWaits, slots)
	if clockErrs == 0 {
		t.Errorf("no process saw a clock step beyond %v: the injected steps did not reach the generator", chaosMaxRegression)
	}
}

func must[T any](v T, _ error) T { return v }
