package catalog

import (
	"errors"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestLeaseWidthsNeverOverlap: with 2 slot bits (whole slots 1..3) and
// leases of 4 bits (parts 1,2,3,5,6,7,... of 16 sequence values: slot s's
// parts are s, s+4, s+8, s+12), a part is never granted while its whole
// slot is live nor a whole slot while one of its parts is; parts fill the
// highest slot first; a new holder starts past every overlapping mark; and
// a whole slot taken over expired parts makes their renewals fail.
func TestLeaseWidthsNeverOverlap(t *testing.T) {
	cat, _ := seedCatalog(t, 8, layoutWithSlots(2))
	ctx := testCtx(t)
	narrow := newLeaser(t, cat, LeaserConfig{Holder: "narrow", LeaseBits: 4, TTL: time.Second})
	whole := newLeaser(t, cat, LeaserConfig{Holder: "whole", TTL: time.Minute})

	first, err := narrow.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Slot != 3 || first.Bits != 4 {
		t.Fatalf("first part: slot %d of %d bits, want 3 of 4 (the highest slot)", first.Slot, first.Bits)
	}
	w1, err1 := whole.Acquire(ctx)
	w2, err2 := whole.Acquire(ctx)
	if err1 != nil || err2 != nil || w1.Slot != 1 || w2.Slot != 2 || w1.Bits != 2 {
		t.Fatalf("whole slots: %v %v, %v %v; want 1 and 2 (3 has a live part)", w1, err1, w2, err2)
	}
	if _, err := whole.Acquire(ctx); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("whole slot while every slot is held or has a live part: %v, want ErrNoFreeSlot", err)
	}
	if _, err := narrow.AcquireBulk(ctx); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("bulk whole slot: %v, want ErrNoFreeSlot", err)
	}
	parts := []*idgen.Lease{first}
	for _, want := range []int{7, 11, 15} {
		l, err := narrow.Acquire(ctx)
		if err != nil || l.Slot != want {
			t.Fatalf("part: %v, %v; want slot %d", l, err, want)
		}
		parts = append(parts, l)
	}
	if _, err := narrow.Acquire(ctx); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("part while slots 1 and 2 are held whole: %v, want ErrNoFreeSlot", err)
	}

	// A released whole slot's exact mark bounds its parts' new holders.
	mark := time.Now().Add(time.Hour).UnixMilli()
	w2.SetHighWater(mark)
	if err := whole.Release(ctx, w2); err != nil {
		t.Fatal(err)
	}
	p2, err := narrow.Acquire(ctx)
	if err != nil || p2.Slot&3 != 2 || p2.MinMs != mark {
		t.Fatalf("part of released slot 2: %+v, %v; want a part of 2 starting after %d", p2, err, mark)
	}

	// Slot 3 goes whole again only once all four parts expired; their
	// holder's renewals then fail.
	var newest int64
	for _, p := range parts {
		newest = max(newest, p.MaxMs())
	}
	var w3 *idgen.Lease
	testkit.Eventually(t, testkit.Wait, func() bool {
		w3, err = whole.Acquire(ctx)
		if err != nil && !errors.Is(err, ErrNoFreeSlot) {
			t.Fatal(err)
		}
		return w3 != nil
	})
	took := time.Now()
	if w3.Slot != 3 || w3.MinMs < newest {
		t.Fatalf("whole slot 3 after its parts expired: slot %d from %d, want 3 from at least %d", w3.Slot, w3.MinMs, newest)
	}
	for _, p := range parts {
		if p.Valid(took) {
			t.Fatalf("part %d still valid locally (deadline %v) when its whole slot was taken at %v", p.Slot, p.Deadline(), took)
		}
		if err := narrow.Renew(ctx, p); !errors.Is(err, idgen.ErrLeaseLost) {
			t.Fatalf("renewal of part %d after its slot was taken whole: %v, want ErrLeaseLost", p.Slot, err)
		}
	}
	checkNoOverlap(t, cat)
	leases, err := cat.SlotLeases(ctx)
	if err != nil || len(leases) != 3+12 {
		t.Fatalf("SlotLeases: %d rows, %v; want 15 (3 whole, 12 parts)", len(leases), err)
	}
}

// TestLeaseBitsRefused: LeaseBits outside [slot_bits, seq_bits] is a
// configuration error.
func TestLeaseBitsRefused(t *testing.T) {
	cat, _ := seedCatalog(t, 8, idgen.DefaultLayout())
	for _, bits := range []uint8{5, 11} {
		if _, err := NewLeaser(testCtx(t), cat, LeaserConfig{LeaseBits: bits}); !errors.Is(err, idgen.ErrInvalidLayout) {
			t.Errorf("LeaseBits %d: %v, want ErrInvalidLayout", bits, err)
		}
	}
}

// checkNoOverlap fails the test if two held leases overlap: one's bits
// are the low bits of the other's (the narrower width's mask agrees).
func checkNoOverlap(t *testing.T, cat *Catalog) {
	t.Helper()
	var overlapping int
	err := cat.pool.QueryRow(testCtx(t), `SELECT count(*) FROM shardkit.slot_leases a JOIN shardkit.slot_leases b
		ON (a.bits, a.slot) < (b.bits, b.slot)
		AND (a.slot & ((1 << LEAST(a.bits, b.bits)) - 1)) = (b.slot & ((1 << LEAST(a.bits, b.bits)) - 1))
		WHERE a.holder IS NOT NULL AND b.holder IS NOT NULL`).Scan(&overlapping)
	if err != nil || overlapping != 0 {
		t.Fatalf("%d pairs of held leases overlap (%v)", overlapping, err)
	}
}
