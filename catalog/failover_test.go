package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// catalogFailover is a catalog on a primary of its own with an
// asynchronous standby, reached through a DSN naming both hosts with
// target_session_attrs=read-write, as an HA deployment reaches it.
type catalogFailover struct {
	primary, standby *pglocal.Cluster
	multi            string // the DSN naming both hosts
}

// newCatalogFailover seeds a catalog (as seedCatalog does) on a new
// cluster, then makes its standby, which has every row so far.
func newCatalogFailover(t *testing.T, shards int, layout idgen.Layout) *catalogFailover {
	t.Helper()
	ctx := testCtx(t)
	set := pgtest.Set(t)
	primary, err := set.Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	dsn := pgtest.NewDatabase(t, len(set.Clusters)-1)
	cat, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits) VALUES ($1, $2, $3, $4, $5, $6)`,
		shards, layout.EpochMs, int16(layout.TimeBits), int16(layout.ShardBits), int16(layout.SeqBits), int16(layout.SlotBits))
	for _, s := range testServers {
		pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn) VALUES ($1, $2)`, s, "postgres://"+s+"/db")
	}
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version)
		SELECT g, CASE WHEN g % 2 = 0 THEN $2 ELSE $3 END, 1 FROM generate_series(0, $1::integer - 1) g`,
		shards, testServers[0], testServers[1])
	standby, err := set.AddStandby(ctx, primary, pglocal.StandbyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return &catalogFailover{primary: primary, standby: standby,
		multi: fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
			primary.Port, standby.Port, pc.Database)}
}

// open opens the catalog through the DSN naming both hosts.
func (f *catalogFailover) open(t *testing.T) *Catalog {
	t.Helper()
	cat, err := Open(testCtx(t), f.multi)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	return cat
}

// cut stops the standby's replication once it has replayed everything
// the primary wrote: what the primary commits after cut is lost when the
// standby is promoted, as the last commits before a crash are with
// asynchronous replication.
func (f *catalogFailover) cut(t *testing.T) {
	t.Helper()
	ctx := testCtx(t)
	primary := pgtest.Connect(t, f.primary.DSN("postgres"))
	// The insert position, not pg_current_wal_lsn() (the write
	// position): the test clusters commit asynchronously, so the commit
	// of the last statement before cut (a lease's release) may still be
	// in the WAL buffers, behind the write position, until the WAL writer
	// gets to it. Waited for at the write position, the standby was cut
	// before it, kept the released lease's grant, and the test found no
	// loss to test (seen once in CI, under load).
	waitFor(t, "the standby to replay the primary's WAL", func() (bool, error) {
		var done bool
		err := primary.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_insert_lsn()), false) FROM pg_stat_replication`).Scan(&done)
		return done, err
	})
	// Stopped, configured and started again, not reloaded: a reload that
	// the startup process has not applied yet can start a WAL receiver
	// with the old primary_conninfo after the waits below saw none, and
	// the grant made after the cut reached the standby (seen once under
	// -race).
	if err := f.standby.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Configure(ctx, map[string]string{"primary_conninfo": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby to stop streaming", func() (bool, error) {
		var n int
		err := primary.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&n)
		return n == 0, err
	})
	// And on the standby's side: no WAL receiver, none starting.
	standby := pgtest.Connect(t, f.standby.DSN("postgres"))
	waitFor(t, "the standby to have no WAL receiver", func() (bool, error) {
		var n int
		err := standby.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n)
		return n == 0, err
	})
}

// lostOnStandby reports whether the promoted standby has no grant of
// lease l: the premise of a failover with loss.
func (f *catalogFailover) lostOnStandby(t *testing.T, l *idgen.Lease) bool {
	t.Helper()
	pc, err := pgconn.ParseConfig(f.multi)
	if err != nil {
		t.Fatal(err)
	}
	c := pgtest.Connect(t, fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", f.standby.Port, pc.Database))
	var n int
	if err := c.QueryRow(testCtx(t), `SELECT count(*) FROM shardkit.slot_leases WHERE slot = $1 AND holder = $2`, l.Slot, l.Holder).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 0
}

// failOver kills the primary and promotes the standby, which lacks what
// the primary committed after cut.
func (f *catalogFailover) failOver(t *testing.T) {
	t.Helper()
	ctx := testCtx(t)
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connLost reports an error of a connection to the killed primary, which
// the pool replaces with one to the promoted standby on the next try.
func connLost(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P01" || pe.Code == "25006" // admin shutdown; read-only (still the standby)
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &ne) || errors.As(err, &ce) ||
		pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// untilAnswered retries f while its error is one of the lost primary's
// connections.
func untilAnswered(t *testing.T, what string, f func() error) error {
	t.Helper()
	var err error
	last := ""
	waitFor(t, what, func() (bool, error) {
		err = f()
		if err != nil && err.Error() != last {
			last = err.Error()
			t.Logf("%s: %v", what, err)
		}
		return !connLost(err), err
	})
	return err
}

// TestLeaseAfterCatalogFailoverWithLoss: a catalog that fails over to a
// standby that had not received a lease's grant shows the slot free; it
// must not grant it to a second process while the first still holds it
// (duplicate IDs). It holds every grant back for one lease TTL, the first
// holder's renewal fails (it stops), and the lease granted after the hold
// has a floor above every ID the first holder may have issued.
func TestLeaseAfterCatalogFailoverWithLoss(t *testing.T) {
	ctx := testCtx(t)
	f := newCatalogFailover(t, 4, layoutWithSlots(1)) // one slot: a second grant of it is a duplicate
	const ttl = 3 * time.Second
	first, err := NewLeaser(ctx, f.open(t), LeaserConfig{Holder: "first", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// A lease granted and released before the cut: its grant and mark
	// are on the standby too, and the TTL it used is recorded.
	early, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx, early); err != nil {
		t.Fatal(err)
	}
	f.cut(t)
	held, err := first.Acquire(ctx) // lost in the failover
	if err != nil {
		t.Fatal(err)
	}
	f.failOver(t)
	if !f.lostOnStandby(t, held) {
		t.Fatalf("the promoted standby holds the grant of slot %d to %s, made after replication was cut: no loss to test", held.Slot, held.Holder)
	}

	second, err := NewLeaser(ctx, f.open(t), LeaserConfig{Holder: "second", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	var hb *HeldBackError
	if l, err := second.Acquire(ctx); err == nil {
		t.Fatalf("a second process was granted slot %d (floor %d) while the first holds slot %d (IDs up to %d): duplicate IDs",
			l.Slot, l.MinMs, held.Slot, held.MaxMs())
	} else if !errors.As(err, &hb) || !errors.Is(err, ErrLeasesHeldBack) || !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("leasing from the promoted catalog: %T %v, want a *HeldBackError matching ErrLeasesHeldBack and ErrNoFreeSlot", err, err)
	}
	// Until one TTL after the change, which came after the lost lease's
	// last grant: past its deadline, and no later than one TTL from now.
	if !hb.Until.After(held.Deadline()) || time.Until(hb.Until) > ttl+time.Second {
		t.Errorf("held back until %v: want after the lost lease's deadline %v, and within one TTL (%v) from now", hb.Until, held.Deadline(), ttl)
	}
	// The first holder's renewal fails: the promoted catalog never
	// granted its lease. It stops issuing (idgen.Generator leases again).
	err = untilAnswered(t, "the first holder's renewal", func() error { return first.Renew(ctx, held) })
	if !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("renewing the lost lease: %v, want idgen.ErrLeaseLost", err)
	}

	// After the hold the slot is granted, with a floor above every ID
	// the first holder may have issued (its lease's MaxMs), and only once
	// its lease had expired on its own clock.
	var got *idgen.Lease
	waitFor(t, "a grant after the hold", func() (bool, error) {
		got, err = second.Acquire(ctx)
		if err != nil && !errors.Is(err, ErrLeasesHeldBack) {
			t.Fatalf("leasing after the hold: %v", err)
		}
		return err == nil, err
	})
	if got.Slot != held.Slot {
		t.Fatalf("granted slot %d, want %d (the only one)", got.Slot, held.Slot)
	}
	if got.MinMs < held.MaxMs() {
		t.Errorf("the new lease's floor %d is below the lost lease's bound %d: their IDs may meet", got.MinMs, held.MaxMs())
	}
	if now := time.Now(); now.Before(held.Deadline()) {
		t.Errorf("granted at %v, before the lost lease's deadline %v", now, held.Deadline())
	}
	// The hold is once per change of history: a release and a new grant
	// right after are not held back.
	if err := second.Release(ctx, got); err != nil {
		t.Fatal(err)
	}
	again, err := second.Acquire(ctx)
	if err != nil {
		t.Fatalf("leasing again on the same history: %v", err)
	}
	if again.MinMs < got.MinMs {
		t.Errorf("the floor went back: %d after %d", again.MinMs, got.MinMs)
	}
}

// TestCatalogFailoverWithLossRegressed: a router whose map holds a change
// the catalog lost in a failover is refused the older map
// (ErrCatalogRegressed, with Epoch), and once the new history reuses the
// version number for another change, the router reads the whole map and
// misses none of the new history's rows.
func TestCatalogFailoverWithLossRegressed(t *testing.T) {
	ctx := testCtx(t)
	f := newCatalogFailover(t, 4, idgen.DefaultLayout())
	cat := f.open(t)
	snap1, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.cut(t)
	if _, err := cat.PlaceShard(ctx, 0, testServers[1], router.StateActive); err != nil { // version 2, lost
		t.Fatal(err)
	}
	snap2, err := cat.LoadChanges(ctx, snap1)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := snap2.Placement(0); snap2.Version != 2 || p.Server != testServers[1] {
		t.Fatalf("after the move: version %d, shard 0 on %s; want 2, %s", snap2.Version, p.Server, testServers[1])
	}
	f.failOver(t)

	var re *RegressedError
	err = untilAnswered(t, "the promoted catalog", func() error { _, err := cat.LoadChanges(ctx, snap2); return err })
	if !errors.As(err, &re) || !errors.Is(err, ErrCatalogRegressed) || re.Had != 2 || re.Now != 1 || !re.Epoch {
		t.Fatalf("reading the promoted catalog at version 1 after 2: %v, want a *RegressedError 2 → 1 with Epoch", err)
	}

	// The new history makes its own version 2: shard 1 moves.
	if _, err := cat.PlaceShard(ctx, 1, testServers[0], router.StateActive); err != nil {
		t.Fatal(err)
	}
	got, err := cat.LoadChanges(ctx, snap2)
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := got.Placement(0)
	p1, _ := got.Placement(1)
	if got.Version != 2 || p0.Server != testServers[0] || p1.Server != testServers[0] {
		t.Fatalf("the new history's version 2: version %d, shard 0 on %s, shard 1 on %s; want 2, both on %s (the whole map read)",
			got.Version, p0.Server, p1.Server, testServers[0])
	}
	if got.CatalogEpoch == snap2.CatalogEpoch {
		t.Fatalf("the catalog's epoch %q did not change in the failover", got.CatalogEpoch)
	}
}

// issuer issues IDs for shard 0 from a generator until stopped, about
// one per ms, keeping them.
type issuer struct {
	mu   sync.Mutex
	ids  []int64
	stop atomic.Bool
	done chan struct{}
}

func issue(g *idgen.Generator) *issuer {
	is := &issuer{done: make(chan struct{})}
	go func() {
		defer close(is.done)
		for !is.stop.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			id, err := g.Next(ctx, 0)
			cancel()
			if err == nil {
				is.mu.Lock()
				is.ids = append(is.ids, id)
				is.mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return is
}

func (is *issuer) count() int { is.mu.Lock(); defer is.mu.Unlock(); return len(is.ids) }

func (is *issuer) finish() []int64 { is.stop.Store(true); <-is.done; return is.ids }

// TestGeneratorsAcrossCatalogFailoverWithLoss: a generator issues IDs
// under a lease the catalog loses in a failover; a second process's
// generator starts on the promoted catalog and issues too. No ID is
// issued twice. (Without the hold, the second got the first's slot at
// once and issued the same IDs in the same milliseconds.)
func TestGeneratorsAcrossCatalogFailoverWithLoss(t *testing.T) {
	ctx := testCtx(t)
	f := newCatalogFailover(t, 4, layoutWithSlots(2)) // 3 slots: the first generator leases again after the hold
	const ttl = 3 * time.Second
	f.cut(t)
	first, stopFirst, err := StartGenerator(ctx, f.open(t), LeaserConfig{Holder: "first", TTL: ttl}, idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stopFirst()
	a := issue(first)
	waitFor(t, "the first generator's IDs", func() (bool, error) { return a.count() >= 50, nil })
	f.failOver(t)

	cat := f.open(t)
	var second *idgen.Generator
	waitFor(t, "the second generator's lease", func() (bool, error) {
		g, stop, err := StartGenerator(ctx, cat, LeaserConfig{Holder: "second", TTL: ttl}, idgen.Config{})
		if err == nil {
			second = g
			t.Cleanup(stop)
			return true, nil
		}
		if !errors.Is(err, ErrNoFreeSlot) && !connLost(err) {
			t.Fatalf("starting a generator on the promoted catalog: %v", err)
		}
		return false, err
	})
	b := issue(second)
	waitFor(t, "the second generator's IDs", func() (bool, error) { return b.count() >= 500, nil })
	idsA, idsB := a.finish(), b.finish()
	seen := make(map[int64]bool, len(idsA)+len(idsB))
	dups := 0
	for _, ids := range [][]int64{idsA, idsB} {
		for _, id := range ids {
			if seen[id] {
				dups++
			}
			seen[id] = true
		}
	}
	if dups > 0 {
		t.Fatalf("%d IDs issued twice among %d of the first generator and %d of the second", dups, len(idsA), len(idsB))
	}
	t.Logf("%d IDs of the first generator, %d of the second: no duplicate", len(idsA), len(idsB))
}
