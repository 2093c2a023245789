package migrations

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// bulkChildEnv makes the test binary a bulk writer: "catalogDSN serverDSN rounds".
const bulkChildEnv = "SHARDKIT_BULKID_TEST_CHILD"

const (
	bulkShard = 5
	bulkBatch = 3000
)

// runBulkChild is one application process importing into shard bulkShard:
// each round takes bulkBatch IDs with one NextN (bulk work: extra slots)
// and COPYs the rows in; every few rounds it pauses past BulkIdle, so its
// extra slots go back to the catalog and other processes take them.
// A duplicate key fails the COPY and the process exits 1.
func runBulkChild(arg string) int {
	var catDSN, srvDSN string
	var rounds int
	if _, err := fmt.Sscan(arg, &catDSN, &srvDSN, &rounds); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, catDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cat.Close()
	var g *idgen.Generator
	var stop func()
	for {
		g, stop, err = catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{TTL: 3 * time.Second},
			idgen.Config{BulkIdle: 150 * time.Millisecond})
		if !errors.Is(err, catalog.ErrNoFreeSlot) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	conn, err := pgx.Connect(ctx, srvDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close(ctx)
	for r := range rounds {
		ids, err := g.NextN(ctx, bulkShard, bulkBatch)
		for errors.Is(err, idgen.ErrLeaseExpired) {
			time.Sleep(10 * time.Millisecond) // starved past the deadline: a new lease comes
			ids, err = g.NextN(ctx, bulkShard, bulkBatch)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		rows := make([][]any, len(ids))
		for i, id := range ids {
			rows[i] = []any{id, int64(bulkShard + 2000*r), "bulk"}
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"shard_0005", "photos"}, []string{"id", "user_id", "caption"}, pgx.CopyFromRows(rows)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if r%4 == 3 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	return 0
}

// TestBulkIDsUniqueAcrossProcessesAndRawSQL: four OS processes import into
// the same shard with bulk IDs (each wants 20 of the catalog's 63 slots,
// so they compete for slots and hand them over as they go idle), while two
// connections insert rows with the column's DEFAULT next_id() (slot 0),
// in bursts and one by one. The primary key refuses any duplicate, which
// fails its writer; afterwards every row is there, and the application
// IDs show milliseconds with more IDs than one slot holds.
func TestBulkIDsUniqueAcrossProcessesAndRawSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	catDSN := pgtest.NewDatabase(t, 0)
	srvDSN := pgtest.NewDatabase(t, 1)
	cat, err := catalog.Open(ctx, catDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if err := Provision(ctx, cat, ProvisionOptions{Servers: []ServerSpec{{Name: "one", DSN: srvDSN}}, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	const procs, rounds = 4, 12
	var cmds []*testkit.Child
	for range procs {
		cmds = append(cmds, testkit.StartChild(t, "", bulkChildEnv+"="+catDSN+" "+srvDSN+" "+strconv.Itoa(rounds)))
	}
	done := make(chan struct{})
	var raw [2]int
	g, gctx := errgroup.WithContext(ctx)
	for w := range 2 {
		conn := pgtest.Connect(t, srvDSN)
		g.Go(func() error {
			for {
				select {
				case <-done:
					return nil
				default:
				}
				sql, n := `INSERT INTO shard_0005.photos (user_id, caption) SELECT 5 + 2000 * g, 'raw' FROM generate_series(1, 300) g`, 300
				if w == 1 {
					sql, n = `INSERT INTO shard_0005.photos (user_id, caption) VALUES (2005, 'raw')`, 1
				}
				if _, err := conn.Exec(gctx, sql); err != nil {
					return fmt.Errorf("raw writer %d: %w", w, err)
				}
				raw[w] += n
			}
		})
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("bulk process %d: %v", i, err)
		}
	}
	close(done)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	conn := pgtest.Connect(t, srvDSN)
	rows, err := conn.Query(ctx, `SELECT id, caption FROM shard_0005.photos`)
	if err != nil {
		t.Fatal(err)
	}
	layout := idgen.DefaultLayout()
	seen := map[int64]bool{}
	perMs := map[int64]int{} // application IDs per ms
	var app, db int
	var id int64
	var caption string
	if _, err := pgx.ForEachRow(rows, []any{&id, &caption}, func() error {
		if seen[id] {
			return fmt.Errorf("duplicate ID %d", id)
		}
		seen[id] = true
		p, err := layout.Decode(id)
		if err != nil || p.Shard != bulkShard {
			return fmt.Errorf("ID %d decodes to %+v, %v", id, p, err)
		}
		switch {
		case caption == "bulk" && p.Slot != 0:
			app++
			perMs[p.UnixMs]++
		case caption == "raw" && p.Slot == 0:
			db++
		default:
			return fmt.Errorf("%s row with ID %d in slot %d", caption, id, p.Slot)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := procs * rounds * bulkBatch; app != want {
		t.Fatalf("%d application rows, want %d", app, want)
	}
	if db != raw[0]+raw[1] {
		t.Fatalf("%d next_id() rows, the raw writers inserted %d", db, raw[0]+raw[1])
	}
	top := 0
	for _, n := range perMs {
		top = max(top, n)
	}
	if one := 1 << layout.CounterBits(); top <= one {
		t.Fatalf("at most %d application IDs in one ms: the bulk path never used more than one slot (%d)", top, one)
	}
	t.Logf("%d application rows from %d processes and %d next_id() rows in shard %d: no duplicates; up to %d application IDs in one ms",
		app, procs, db, bulkShard, top)
}
