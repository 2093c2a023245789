package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

type slotRow struct {
	holder  *string
	expires *time.Time
	hwm     int64
}

func readSlot(t *testing.T, cat *Catalog, slot int) slotRow {
	t.Helper()
	var r slotRow
	err := cat.pool.QueryRow(testCtx(t), `SELECT holder, expires_at, hwm_ms FROM shardkit.slot_leases WHERE slot = $1`, slot).
		Scan(&r.holder, &r.expires, &r.hwm)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newLeaser(t *testing.T, cat *Catalog, cfg LeaserConfig) *Leaser {
	t.Helper()
	s, err := NewLeaser(testCtx(t), cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAcquireTakesOldestMarkAndNeverSlotZero(t *testing.T) {
	cat, dsn := seedCatalog(t, 8, layoutWithSlots(2)) // slots 1..3
	ctx := testCtx(t)
	s := newLeaser(t, cat, LeaserConfig{Holder: "test"})
	before := time.Now()
	first, err := s.Acquire(ctx) // creates the slot rows, all with mark 0: takes slot 1
	if err != nil {
		t.Fatal(err)
	}
	if first.Slot != 1 || first.MinMs != 0 {
		t.Fatalf("first lease: slot %d min %d, want 1 and 0", first.Slot, first.MinMs)
	}
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, dsn, `UPDATE shardkit.slot_leases SET hwm_ms = CASE slot WHEN 1 THEN 300 WHEN 2 THEN 100 ELSE 200 END`)
	var got []string
	var leases []*idgen.Lease
	for range 3 {
		sent := time.Now()
		l, err := s.Acquire(ctx)
		answered := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		got = append(got, fmt.Sprintf("%d>%d", l.Slot, l.MinMs))
		row := readSlot(t, cat, l.Slot)
		if row.holder == nil || *row.holder != s.Holder() || !strings.HasPrefix(s.Holder(), "test:") {
			t.Fatalf("slot %d holder %v, want %q", l.Slot, row.holder, s.Holder())
		}
		// The recorded mark bounds every ID the holder may issue: send time + TTL + borrow.
		if min := before.Add(DefaultLeaseTTL + idgen.DefaultMaxBorrow).UnixMilli(); row.hwm < min || row.hwm != l.MaxMs() {
			t.Fatalf("slot %d mark %d, lease bound %d, want ≥ %d and equal", l.Slot, row.hwm, l.MaxMs(), min)
		}
		// The local deadline is TTL - TTL/5 = 8 s after the request was
		// sent: between send and answer however slow the machine is.
		if d := l.Deadline(); d.Before(sent.Add(8*time.Second)) || d.After(answered.Add(8*time.Second)) {
			t.Fatalf("local deadline %v, want 8s after the request, between %v and %v", d, sent.Add(8*time.Second), answered.Add(8*time.Second))
		}
	}
	if want := "2>100 3>200 1>300"; strings.Join(got, " ") != want {
		t.Fatalf("acquired %q, want %q (oldest mark first)", strings.Join(got, " "), want)
	}
	_, err = newLeaser(t, cat, LeaserConfig{}).Acquire(ctx)
	if !errors.Is(err, ErrNoFreeSlot) || !errors.Is(err, idgen.ErrNoFreeSlot) {
		t.Fatalf("Acquire with every slot held = %v, want ErrNoFreeSlot", err)
	}
	var n, zero int
	if err := cat.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE slot = 0) FROM shardkit.slot_leases`).Scan(&n, &zero); err != nil {
		t.Fatal(err)
	}
	if n != 3 || zero != 0 {
		t.Fatalf("%d slot rows (%d for slot 0), want 3 and none", n, zero)
	}
	// Slot 0 cannot even be written: it belongs to next_id().
	if _, err := cat.pool.Exec(ctx, `INSERT INTO shardkit.slot_leases (slot) VALUES (0)`); err == nil {
		t.Fatal("slot 0 row accepted")
	}
	for _, l := range leases {
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNoSlotBits(t *testing.T) {
	cat, _ := seedCatalog(t, 8, layoutWithSlots(0))
	if _, err := newLeaser(t, cat, LeaserConfig{}).Acquire(testCtx(t)); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("Acquire without slot bits = %v, want ErrNoFreeSlot", err)
	}
	if _, _, err := StartGenerator(testCtx(t), cat, LeaserConfig{}, idgen.Config{}); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("StartGenerator without slot bits = %v, want ErrNoFreeSlot", err)
	}
}

func TestNoCatalogLeaser(t *testing.T) {
	ctx := testCtx(t)
	cat, err := Open(ctx, pgtest.NewDatabase(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := NewLeaser(ctx, cat, LeaserConfig{}); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("NewLeaser on an empty database = %v, want ErrNoCatalog", err)
	}
}

func TestRenewAndRelease(t *testing.T) {
	cat, _ := seedCatalog(t, 8, layoutWithSlots(1))
	ctx := testCtx(t)
	s := newLeaser(t, cat, LeaserConfig{TTL: 2 * time.Second})
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	row := readSlot(t, cat, l.Slot)
	d0, m0 := l.Deadline(), l.MaxMs()
	time.Sleep(20 * time.Millisecond)
	if err := s.Renew(ctx, l); err != nil {
		t.Fatal(err)
	}
	row2 := readSlot(t, cat, l.Slot)
	if !l.Deadline().After(d0) || l.MaxMs() <= m0 || !row2.expires.After(*row.expires) || row2.hwm != l.MaxMs() {
		t.Fatalf("renewal did not move the lease forward: deadline %v→%v, bound %d→%d, expiry %v→%v, mark %d",
			d0, l.Deadline(), m0, l.MaxMs(), row.expires, row2.expires, row2.hwm)
	}
	// Released with the exact mark the generator reports.
	exact := time.Now().UnixMilli()
	l.SetHighWater(exact)
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	row3 := readSlot(t, cat, l.Slot)
	if row3.holder != nil || row3.expires != nil || row3.hwm != exact {
		t.Fatalf("after release: holder %v expiry %v mark %d, want free with mark %d", row3.holder, row3.expires, row3.hwm, exact)
	}
	if l.Valid(time.Now()) {
		t.Fatal("released lease still valid")
	}
	if err := s.Renew(ctx, l); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("Renew after release = %v, want ErrLeaseLost", err)
	}
	// The next holder starts after the exact mark.
	l2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Slot != l.Slot || l2.MinMs != exact {
		t.Fatalf("next lease: slot %d after %d, want slot %d after %d", l2.Slot, l2.MinMs, l.Slot, exact)
	}
}

// TestExpiredSlotIsRetakenOnlyAfterExpiry: a holder that stops renewing
// loses its slot to another only after the catalog's expiry, which is
// after the old holder's local deadline; the new holder starts after the
// old holder's recorded mark, and the old holder's renewal then fails.
func TestExpiredSlotIsRetakenOnlyAfterExpiry(t *testing.T) {
	cat, _ := seedCatalog(t, 8, layoutWithSlots(1)) // one slot
	ctx := testCtx(t)
	a := newLeaser(t, cat, LeaserConfig{Holder: "a", TTL: time.Second})
	b := newLeaser(t, cat, LeaserConfig{Holder: "b", TTL: time.Second})
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expires := *readSlot(t, cat, 1).expires
	var lb *idgen.Lease
	for {
		lb, err = b.Acquire(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoFreeSlot) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Now()
	if took.Before(expires) {
		t.Fatalf("slot retaken at %v, before the catalog expiry %v", took, expires)
	}
	if !la.Deadline().Before(expires) || la.Valid(took) {
		t.Fatalf("old holder's local deadline %v is not before the expiry %v", la.Deadline(), expires)
	}
	if lb.MinMs != la.MaxMs() {
		t.Fatalf("new holder starts after %d, want the old holder's mark %d", lb.MinMs, la.MaxMs())
	}
	if err := a.Renew(ctx, la); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("old holder's renewal = %v, want ErrLeaseLost", err)
	}
	if err := a.Release(ctx, la); !errors.Is(err, idgen.ErrLeaseLost) {
		t.Fatalf("old holder's release = %v, want ErrLeaseLost", err)
	}
	if r := readSlot(t, cat, 1); r.holder == nil || *r.holder != b.Holder() {
		t.Fatalf("slot holder %v after the old holder's calls, want %s", r.holder, b.Holder())
	}
}

// TestHolderThatCannotRenewStopsFirst cuts a running generator off from
// renewing (its database role loses UPDATE on slot_leases) and checks
// that it stops issuing before the catalog lets anyone else have the slot.
func TestHolderThatCannotRenewStopsFirst(t *testing.T) {
	cat, dsn := seedCatalog(t, 8, layoutWithSlots(1))
	ctx := testCtx(t)
	role := fmt.Sprintf("leaser_%d", time.Now().UnixNano())
	pgtest.Exec(t, dsn, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN`)
	pgtest.Exec(t, dsn, `GRANT USAGE ON SCHEMA shardkit TO `+pgx.Identifier{role}.Sanitize())
	pgtest.Exec(t, dsn, `GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA shardkit TO `+pgx.Identifier{role}.Sanitize())
	t.Cleanup(func() {
		pgtest.Exec(t, dsn, `DROP OWNED BY `+pgx.Identifier{role}.Sanitize())
		pgtest.Exec(t, dsn, `DROP ROLE `+pgx.Identifier{role}.Sanitize())
	})
	acat, err := Open(ctx, strings.Replace(dsn, "postgres@", role+"@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer acat.Close()
	g, stop, err := StartGenerator(ctx, acat, LeaserConfig{TTL: 900 * time.Millisecond}, idgen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := g.Next(ctx, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // at least one renewal
	pgtest.Exec(t, dsn, `REVOKE UPDATE ON shardkit.slot_leases FROM `+pgx.Identifier{role}.Sanitize())
	var last int64
	for {
		id, err := g.Next(ctx, 3)
		if errors.Is(err, idgen.ErrLeaseExpired) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = id
		time.Sleep(time.Millisecond)
	}
	// The generator stops at its local deadline, which is before the
	// catalog's expiry; its last ID (stamped with its issue time) is too.
	// Checked on the lease and the ID, not on when this loop noticed: a
	// loaded machine may wake the loop late.
	expires := *readSlot(t, cat, 1).expires
	if deadline := g.Lease().Deadline(); !deadline.Before(expires) {
		t.Fatalf("generator's deadline %v is not before the catalog expiry %v", deadline, expires)
	}
	if lastMs := g.Layout().UnixMsOf(last); lastMs >= expires.UnixMilli() {
		t.Fatalf("last ID issued at %d ms, not before the catalog expiry %v", lastMs, expires)
	}
	b := newLeaser(t, cat, LeaserConfig{Holder: "b"})
	var lb *idgen.Lease
	for lb == nil {
		lb, err = b.Acquire(ctx)
		if err != nil && !errors.Is(err, ErrNoFreeSlot) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lastMs := g.Layout().UnixMsOf(last); lb.MinMs < lastMs {
		t.Fatalf("new holder starts after %d, but the old one issued an ID at %d", lb.MinMs, lastMs)
	}
	if _, err := g.Next(ctx, 3); !errors.Is(err, idgen.ErrLeaseExpired) {
		t.Fatalf("old generator after the slot was retaken: %v, want ErrLeaseExpired", err)
	}
	if err := b.Release(ctx, lb); err != nil {
		t.Fatal(err)
	}
}

func TestSlotLeases(t *testing.T) {
	cat, _ := seedCatalog(t, 8, layoutWithSlots(2))
	ctx := testCtx(t)
	if got, err := cat.SlotLeases(ctx); err != nil || len(got) != 0 {
		t.Fatalf("SlotLeases before any lease = %v, %v", got, err)
	}
	s := newLeaser(t, cat, LeaserConfig{Holder: "status"})
	l, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cat.SlotLeases(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("SlotLeases = %v, %v", got, err)
	}
	for _, sl := range got {
		held := sl.Slot == l.Slot
		if sl.Live != held || (sl.Holder == s.Holder()) != held || (sl.ExpiresAt != nil) != held {
			t.Fatalf("slot %d: %+v (held: %v)", sl.Slot, sl, held)
		}
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	got, _ = cat.SlotLeases(ctx)
	if got[l.Slot-1].Live || got[l.Slot-1].Holder != "" {
		t.Fatalf("released slot still held: %+v", got[l.Slot-1])
	}
	empty, err := Open(ctx, pgtest.NewDatabase(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := empty.SlotLeases(ctx); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("SlotLeases without a catalog = %v", err)
	}
}

// TestAcquireSkipsALeaseRenewedUnderIt: an expired lease whose holder's
// renewal commits while an acquisition is picking it stays its holder's;
// the acquisition takes another (its take refuses the revived one, and the
// next try's pick skips it).
func TestAcquireSkipsALeaseRenewedUnderIt(t *testing.T) {
	cat, dsn := seedCatalog(t, 8, layoutWithSlots(2)) // slots 1..3
	ctx := testCtx(t)
	a := newLeaser(t, cat, LeaserConfig{})
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a's lease has expired on the catalog's clock, and is the one a pick
	// prefers (the oldest mark).
	pgtest.Exec(t, dsn, `UPDATE shardkit.slot_leases SET expires_at = now() - interval '1 second', hwm_ms = 0 WHERE slot = $1`, la.Slot)
	pgtest.Exec(t, dsn, `UPDATE shardkit.slot_leases SET hwm_ms = $2 WHERE slot <> $1`, la.Slot, time.Now().UnixMilli())

	// a's renewal is under way: its row is locked, not yet committed.
	renewal, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer renewal.Close(ctx)
	tx, err := renewal.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE shardkit.slot_leases SET expires_at = now() + interval '1 minute' WHERE slot = $1 AND holder = $2`, la.Slot, la.Holder); err != nil {
		t.Fatal(err)
	}
	got := make(chan *idgen.Lease, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := newLeaser(t, cat, LeaserConfig{}).Acquire(ctx)
		if err != nil {
			failed <- err
			return
		}
		got <- l
	}()
	// The acquisition picked a's lease and waits to clear it.
	watch := pgtest.Connect(t, dsn)
	testkit.Until(t, testkit.Wait, func() error {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE shardkit.slot_leases o SET holder = NULL%'`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d acquisitions wait to clear the expired lease, want 1", n)
		}
		return nil
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Fatalf("acquisition: %v", err)
	case lb := <-got:
		if lb.Slot == la.Slot {
			t.Fatalf("the acquisition took slot %d, whose holder renewed it", la.Slot)
		}
	case <-ctx.Done():
		t.Fatal("the acquisition did not end")
	}
	if r := readSlot(t, cat, la.Slot); r.holder == nil || *r.holder != la.Holder || !r.expires.After(time.Now()) {
		t.Fatalf("slot %d after the acquisition: holder %v, expires %v; want %s's, live", la.Slot, r.holder, r.expires, la.Holder)
	}
}
