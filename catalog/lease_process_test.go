package catalog

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// Child processes: the parent re-runs the test binary with these variables.
const (
	childModeEnv  = "SHARDKIT_TEST_CHILD" // "generate", "hold", "chaos" or "fleet"
	childDSNEnv   = "SHARDKIT_TEST_CATALOG"
	childOutEnv   = "SHARDKIT_TEST_OUT"
	childCountEnv = "SHARDKIT_TEST_COUNT"
	childShard    = 7
	childRounds   = 2
)

// runChild is a child process's whole life. "generate" issues the
// requested number of IDs for childShard in two rounds, each on a freshly
// leased slot (waiting while none is free), and writes them to the output
// file. "hold" leases the slot and issues IDs forever, writing each batch
// to the file as it goes, until it is killed.
func runChild(mode string) int {
	ctx := context.Background()
	cat, err := Open(ctx, os.Getenv(childDSNEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cat.Close()
	f, err := os.Create(os.Getenv(childOutEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	switch mode {
	case "generate":
		n, _ := strconv.Atoi(os.Getenv(childCountEnv))
		w := bufio.NewWriterSize(f, 1<<20)
		for range childRounds {
			g, stop, err := startWaiting(ctx, cat, LeaserConfig{TTL: 3 * time.Second})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			for i := 0; i < n/childRounds; {
				id, err := g.Next(ctx, childShard)
				if errors.Is(err, idgen.ErrLeaseExpired) {
					// Starved of CPU past the deadline: the generator
					// leases a slot again in the background.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				_ = binary.Write(w, binary.LittleEndian, id)
				i++
			}
			stop()
		}
		if err := w.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "hold":
		g, _, err := startWaiting(ctx, cat, LeaserConfig{TTL: 2 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		batch := make([]int64, 64)
		buf := make([]byte, 8*len(batch))
		for {
			if err := g.Fill(ctx, childShard, batch); errors.Is(err, idgen.ErrLeaseExpired) {
				time.Sleep(10 * time.Millisecond)
				continue
			} else if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			for i, id := range batch {
				binary.LittleEndian.PutUint64(buf[8*i:], uint64(id))
			}
			if _, err := f.Write(buf); err != nil { // unbuffered: survives SIGKILL
				return 1
			}
		}
	case "fleet":
		n, _ := strconv.Atoi(os.Getenv(childCountEnv))
		if err := runFleetChild(ctx, cat, f, n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "chaos":
		n, _ := strconv.Atoi(os.Getenv(childCountEnv))
		if err := runChaosChild(ctx, cat, f, n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

// startWaiting starts a generator, waiting while every slot is held.
func startWaiting(ctx context.Context, cat *Catalog, lc LeaserConfig) (*idgen.Generator, func(), error) {
	for {
		g, stop, err := StartGenerator(ctx, cat, lc, idgen.Config{})
		if !errors.Is(err, ErrNoFreeSlot) {
			return g, stop, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startChild runs the test binary again as a child process in mode (see
// runChild), killed at the end of the test if it still runs.
func startChild(t *testing.T, mode, dsn, out string, count int) *testkit.Child {
	t.Helper()
	return testkit.StartChild(t, "", childModeEnv+"="+mode, childDSNEnv+"="+dsn, childOutEnv+"="+out, childCountEnv+"="+strconv.Itoa(count))
}

func readIDs(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(b)/8)
	for i := range ids {
		ids[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return ids
}

// TestUniqueAcrossProcesses: four OS processes share a catalog with only
// three application slots (2 slot bits: 256 IDs per ms per shard each), so
// slots are handed from one process to another as they are released; each
// issues 200,000 IDs for the same shard as fast as it can. No duplicates.
func TestUniqueAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const procs, each = 4, 200_000
	layout := layoutWithSlots(2)
	_, dsn := seedCatalog(t, 8, layout)
	dir := t.TempDir()
	start := time.Now()
	var cmds []*testkit.Child
	for i := range procs {
		cmds = append(cmds, startChild(t, "generate", dsn, filepath.Join(dir, strconv.Itoa(i)), each))
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	var all []int64
	slots := map[int]int{}
	for i := range procs {
		ids := readIDs(t, filepath.Join(dir, strconv.Itoa(i)))
		if len(ids) != each {
			t.Fatalf("child %d wrote %d IDs, want %d", i, len(ids), each)
		}
		for j, id := range ids {
			p, err := layout.Decode(id)
			if err != nil || p.Shard != childShard || p.Slot == 0 || p.UnixMs < start.UnixMilli() || p.UnixMs > time.Now().UnixMilli()+200 {
				t.Fatalf("child %d ID %d decodes to %+v, %v", i, id, p, err)
			}
			// Each round is one generator: its IDs increase. (The next round
			// may lease another slot and start below the last round's borrowed
			// milliseconds; uniqueness does not depend on order.)
			if j%(each/childRounds) > 0 && id <= ids[j-1] {
				t.Fatalf("child %d: ID %d after %d", i, id, ids[j-1])
			}
			slots[p.Slot]++
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate ID %d", all[i])
		}
	}
	t.Logf("%d processes × %d IDs for shard %d in %v: no duplicates; IDs per slot %v", procs, each, childShard, elapsed, slots)
}

// TestKilledHolderIsFenced SIGKILLs a process that holds the only slot
// while it issues IDs. Another leaser gets the slot only after the
// catalog's expiry, starts after the dead holder's recorded mark, and its
// IDs do not overlap the dead holder's: all are later.
func TestKilledHolderIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	layout := layoutWithSlots(1) // slot 1 only
	cat, dsn := seedCatalog(t, 8, layout)
	ctx := testCtx(t)
	out := filepath.Join(t.TempDir(), "held")
	child := startChild(t, "hold", dsn, out, 0)
	testkit.Eventually(t, testkit.Wait, func() bool { // the child issues IDs
		fi, err := os.Stat(out)
		return err == nil && fi.Size() >= 8*64*100
	})
	leased := readSlot(t, cat, 1).expires
	testkit.Eventually(t, testkit.Wait, func() bool { // past at least one renewal (every TTL/3)
		r := readSlot(t, cat, 1)
		return leased != nil && r.expires != nil && r.expires.After(*leased)
	})
	child.Kill()
	killed := readSlot(t, cat, 1)
	dead := readIDs(t, out)

	b := newLeaser(t, cat, LeaserConfig{Holder: "successor", TTL: time.Second})
	var lb *idgen.Lease
	for {
		l, err := b.Acquire(ctx)
		if err == nil {
			lb = l
			break
		}
		if !errors.Is(err, ErrNoFreeSlot) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Now()
	if took.Before(*killed.expires) {
		t.Fatalf("slot retaken at %v, before the dead holder's expiry %v", took, *killed.expires)
	}
	if lb.MinMs != killed.hwm {
		t.Fatalf("successor starts after %d, want the dead holder's mark %d", lb.MinMs, killed.hwm)
	}
	g, err := idgen.New(layout, lb, idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	next := make([]int64, 20000)
	if err := g.Fill(ctx, childShard, next); err != nil {
		t.Fatal(err)
	}
	lastDead := slices.Max(dead)
	if layout.UnixMsOf(lastDead) > killed.hwm {
		t.Fatalf("dead holder issued an ID at %d, beyond its recorded mark %d", layout.UnixMsOf(lastDead), killed.hwm)
	}
	if first := layout.UnixMsOf(next[0]); first <= layout.UnixMsOf(lastDead) || first <= killed.hwm {
		t.Fatalf("successor's first ID at %d, dead holder's last at %d (mark %d)", first, layout.UnixMsOf(lastDead), killed.hwm)
	}
	seen := make(map[int64]bool, len(dead))
	for _, id := range dead {
		seen[id] = true
	}
	for _, id := range next {
		if seen[id] {
			t.Fatalf("ID %d issued by both holders", id)
		}
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("dead holder issued %d IDs up to %d ms (mark %d); successor took the slot %v after its catalog expiry and started at %d ms",
		len(dead), layout.UnixMsOf(lastDead), killed.hwm, took.Sub(*killed.expires), layout.UnixMsOf(next[0]))
}
