package idgen

import (
	"errors"
	"testing"
	"time"
)

func TestLayoutValidate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mod := func(f func(*Layout)) Layout { l := DefaultLayout(); f(&l); return l }
	tests := []struct {
		name    string
		layout  Layout
		wantErr bool
	}{
		{"default", DefaultLayout(), false},
		{"no slots", mod(func(l *Layout) { l.SlotBits = 0 }), false},
		{"wide shards", Layout{EpochMs: DefaultEpochMs, TimeBits: 40, ShardBits: 16, SeqBits: 8, SlotBits: 3}, false},
		{"epoch zero", mod(func(l *Layout) { l.EpochMs = 0 }), false},
		{"epoch now", mod(func(l *Layout) { l.EpochMs = now.UnixMilli() }), false},
		{"bits sum 63", mod(func(l *Layout) { l.TimeBits = 40 }), true},
		{"bits sum 65", mod(func(l *Layout) { l.SeqBits = 11 }), true},
		{"zero value", Layout{}, true},
		{"zero time bits", Layout{EpochMs: DefaultEpochMs, ShardBits: 32, SeqBits: 32}, true},
		{"one time bit is only the sign", Layout{EpochMs: DefaultEpochMs, TimeBits: 1, ShardBits: 53, SeqBits: 10}, true},
		{"zero shard bits", Layout{EpochMs: DefaultEpochMs, TimeBits: 54, SeqBits: 10}, true},
		{"zero seq bits", Layout{EpochMs: DefaultEpochMs, TimeBits: 51, ShardBits: 13}, true},
		{"slot bits equal seq bits", mod(func(l *Layout) { l.SlotBits = 10 }), true},
		{"slot bits above seq bits", mod(func(l *Layout) { l.SlotBits = 12 }), true},
		{"epoch in the future", mod(func(l *Layout) { l.EpochMs = now.Add(time.Millisecond).UnixMilli() }), true},
		{"negative epoch", mod(func(l *Layout) { l.EpochMs = -1 }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.layout.validateAt(now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("validate(%+v) = %v, want error %v", tt.layout, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("error %v does not wrap ErrInvalidLayout", err)
			}
		})
	}
}

func TestComposeErrors(t *testing.T) {
	l := DefaultLayout()
	last := l.EpochMs + l.MaxTimeMs()
	tests := []struct {
		name         string
		unixMs       int64
		shard, seq   int
		wantErr      bool
		wantPositive bool
	}{
		{"epoch", l.EpochMs, 0, 0, false, true},
		{"2023", 1700000000000, 1341, 7, false, true},
		{"last ms stays positive", last, 8191, 1023, false, true},
		{"past last ms would set the sign bit", last + 1, 0, 0, true, false},
		{"before epoch", l.EpochMs - 1, 0, 0, true, false},
		{"negative shard", l.EpochMs, -1, 0, true, false},
		{"shard = 2^bits", l.EpochMs, 8192, 0, true, false},
		{"negative seq", l.EpochMs, 0, -1, true, false},
		{"seq = 2^bits", l.EpochMs, 0, 1024, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := l.Compose(tt.unixMs, tt.shard, tt.seq)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Compose(%d, %d, %d) = %d, %v; want error %v", tt.unixMs, tt.shard, tt.seq, id, err, tt.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("error %v does not wrap ErrOutOfRange", err)
				}
				return
			}
			if tt.wantPositive && id < 0 {
				t.Fatalf("Compose = %d, negative", id)
			}
			p, err := l.Decode(id)
			if err != nil || p.UnixMs != tt.unixMs || p.Shard != tt.shard || p.Seq != tt.seq {
				t.Fatalf("Decode(%d) = %+v, %v", id, p, err)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	l := DefaultLayout()
	for _, id := range []int64{-1, -1 << 63, -(1 << 40)} {
		if _, err := l.Decode(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Decode(%d) error = %v, want ErrInvalidID", id, err)
		}
		if _, err := l.ShardOf(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ShardOf(%d) error = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestDecodeParts(t *testing.T) {
	l := DefaultLayout()
	id, err := l.Compose(1700000000123, 1341, l.SeqOf(5, 9))
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	want := Parts{ID: id, UnixMs: 1700000000123, Time: time.UnixMilli(1700000000123).UTC(), Shard: 1341, Seq: 5<<6 | 9, Slot: 9, Counter: 5}
	if p != want {
		t.Fatalf("Decode = %+v, want %+v", p, want)
	}
	if s, _ := l.ShardOf(id); s != 1341 {
		t.Fatalf("ShardOf = %d", s)
	}
	if u := l.UnixMsOf(id); u != 1700000000123 {
		t.Fatalf("UnixMsOf = %d", u)
	}
	if m := l.MinIDAt(1700000000123); m > id || m+1<<23 <= id {
		t.Fatalf("MinIDAt = %d, id %d", m, id)
	}
	if m := l.MinIDAt(0); m != 0 {
		t.Fatalf("MinIDAt(before epoch) = %d", m)
	}
}
