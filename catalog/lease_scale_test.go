package catalog

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
)

// Fleet: many generators per OS process, each with its own Leaser (its
// own holder in the catalog) on the process's one catalog pool.
const (
	fleetLeaseBits = 10 // every sequence bit: 1008 leases of one ID per ms per shard
	fleetShards    = 4  // every generator issues for shards 0..3
	fleetIDs       = 200
	fleetTTL       = DefaultLeaseTTL
)

// fleetLeasing is how many generators of a fleet child lease at once.
// Acquisitions wait for the catalog's lease lock inside a transaction, on
// a connection of the process's one catalog pool (4 connections here): a
// child leasing all of its 250 at once kept every connection waiting on
// the lock, and on a loaded machine the renewals of the leases it already
// held waited past their TTL and were lost. One generator per process, as
// in a deployment, never meets that; two at a time leaves the renewals
// connections.
const fleetLeasing = 2

// runFleetChild starts n generators on leases of fleetLeaseBits bits,
// fleetLeasing at a time, prints "ready <ms to lease them all>" once
// every one holds its lease,
// waits for its stdin to close, then has all of them issue fleetIDs IDs
// each at once for the same shards and writes the IDs to f.
func runFleetChild(ctx context.Context, cat *Catalog, f *os.File, n int) error {
	start := time.Now()
	gens := make([]*idgen.Generator, n)
	stops := make([]func(), n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	leasing := make(chan struct{}, fleetLeasing)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leasing <- struct{}{}
			defer func() { <-leasing }()
			g, stop, err := StartGenerator(ctx, cat, LeaserConfig{LeaseBits: fleetLeaseBits, TTL: fleetTTL}, idgen.Config{})
			if err != nil {
				errs <- fmt.Errorf("generator %d: %w", i, err)
				return
			}
			gens[i], stops[i] = g, stop
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("ready %d\n", time.Since(start).Milliseconds())
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		return err
	}
	out := make([][]int64, n)
	errs = make(chan error, n)
	for i, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < fleetIDs; {
				id, err := g.Next(ctx, j%fleetShards)
				if errors.Is(err, idgen.ErrLeaseExpired) {
					time.Sleep(10 * time.Millisecond) // starved past the deadline: renewal resumes it
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				out[i] = append(out[i], id)
				j++
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for _, stop := range stops {
		stop()
	}
	w := bufio.NewWriter(f)
	for _, ids := range out {
		_ = binary.Write(w, binary.LittleEndian, ids)
	}
	return w.Flush()
}

// TestLeasesOfThousandGeneratorsAcrossProcesses: 1000 generators in four OS
// processes lease from one catalog at once (fleetLeasing at a time in
// each process), with leases of 10 bits (1008 exist). Every one gets a lease (none falls back to next_id()), no two
// live leases overlap, and once all hold theirs they issue IDs for the
// same four shards at the same time: no duplicate, none in next_id()'s
// slot 0. It logs the lease table's load: lease time, rows, size, renewals.
func TestLeasesOfThousandGeneratorsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const procs, each = 4, 250
	layout := idgen.DefaultLayout()
	cat, dsn := seedCatalog(t, 2000, layout)
	ctx := testCtx(t)
	dir := t.TempDir()
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		ready chan string
	}
	var kids []child
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childModeEnv+"=fleet", childDSNEnv+"="+dsn,
			childOutEnv+"="+filepath.Join(dir, strconv.Itoa(i)), childCountEnv+"="+strconv.Itoa(each))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ready := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- strings.TrimSpace(line)
			_, _ = io.Copy(io.Discard, stdout)
		}()
		kids = append(kids, child{cmd, stdin, ready})
	}
	var leaseMs []string
	for i, k := range kids {
		line := <-k.ready
		ms, ok := strings.CutPrefix(line, "ready ")
		if !ok {
			t.Fatalf("child %d did not lease its %d generators (said %q; see its stderr)", i, each, line)
		}
		leaseMs = append(leaseMs, ms)
	}
	// Every generator holds a live lease now.
	var liveN, holders int
	err := cat.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT holder) FROM shardkit.slot_leases
		WHERE holder IS NOT NULL AND expires_at > clock_timestamp()`).Scan(&liveN, &holders)
	if err != nil {
		t.Fatal(err)
	}
	if liveN != procs*each || holders != procs*each {
		t.Fatalf("%d live leases by %d holders, want %d", liveN, holders, procs*each)
	}
	checkNoOverlap(t, cat)
	// The lease table's load while 1000 holders renew every TTL/3.
	var rows, bytes, upd0, upd1 int64
	updates := `SELECT pg_stat_clear_snapshot(), n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'shardkit' AND relname = 'slot_leases'`
	if err := cat.pool.QueryRow(ctx, updates).Scan(nil, &upd0); err != nil {
		t.Fatal(err)
	}
	window := time.Now()
	time.Sleep(fleetTTL / 2)
	if err := cat.pool.QueryRow(ctx, updates).Scan(nil, &upd1); err != nil {
		t.Fatal(err)
	}
	renewals := float64(upd1-upd0) / time.Since(window).Seconds()
	if err := cat.pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size('shardkit.slot_leases') FROM shardkit.slot_leases`).Scan(&rows, &bytes); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d generators in %d processes leased in %s ms per process; slot_leases: %d rows, %d kB; %.0f row updates/s while held (TTL %v)",
		procs*each, procs, strings.Join(leaseMs, "/"), rows, bytes/1024, renewals, fleetTTL)
	for _, k := range kids {
		_ = k.stdin.Close()
	}
	for i, k := range kids {
		if err := k.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	var all []int64
	for i := range procs {
		ids := readIDs(t, filepath.Join(dir, strconv.Itoa(i)))
		if len(ids) != each*fleetIDs {
			t.Fatalf("child %d wrote %d IDs, want %d", i, len(ids), each*fleetIDs)
		}
		for _, id := range ids {
			p, err := layout.Decode(id)
			if err != nil || p.Shard >= fleetShards || p.Slot == 0 {
				t.Fatalf("child %d ID %d decodes to %+v, %v", i, id, p, err)
			}
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate ID %d among %d", all[i], len(all))
		}
	}
	t.Logf("%d IDs for shards 0..%d from %d generators: 0 duplicates", len(all), fleetShards-1, procs*each)
}
