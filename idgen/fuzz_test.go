package idgen

import (
	"errors"
	"testing"
	"time"
)

// FuzzComposeDecode checks, for every valid layout (the fuzzer picks the
// layout too), that Compose refuses exactly the out-of-range components
// and that Decode returns what Compose packed.
func FuzzComposeDecode(f *testing.F) {
	f.Add(uint8(41), uint8(13), uint8(6), uint64(DefaultEpochMs), int64(1700000000000), 1341, 7)
	f.Add(uint8(41), uint8(13), uint8(0), uint64(0), int64(0), 0, 0)
	f.Add(uint8(2), uint8(1), uint8(60), uint64(1), int64(2), 1, 1<<60)
	f.Add(uint8(62), uint8(1), uint8(0), uint64(DefaultEpochMs), int64(-1), -1, -1)
	f.Add(uint8(40), uint8(16), uint8(3), uint64(DefaultEpochMs), int64(1<<45), 65535, 255)
	now := time.Now()
	f.Fuzz(func(t *testing.T, timeBits, shardBits, slotBits uint8, epoch uint64, unixMs int64, shard, seq int) {
		l := Layout{EpochMs: int64(epoch % uint64(now.UnixMilli()+1)), TimeBits: timeBits % 64, ShardBits: shardBits % 64, SlotBits: slotBits % 64}
		if int(l.TimeBits)+int(l.ShardBits) < 64 {
			l.SeqBits = 64 - l.TimeBits - l.ShardBits
		}
		if err := l.validateAt(now); err != nil {
			if !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("validate: %v does not wrap ErrInvalidLayout", err)
			}
			return
		}
		fits := unixMs >= l.EpochMs && unixMs-l.EpochMs <= l.MaxTimeMs() &&
			shard >= 0 && shard < l.MaxShards() && seq >= 0 && uint64(seq) < 1<<l.SeqBits
		id, err := l.Compose(unixMs, shard, seq)
		if fits != (err == nil) {
			t.Fatalf("%+v Compose(%d, %d, %d) = %d, %v; components fit: %v", l, unixMs, shard, seq, id, err, fits)
		}
		if err != nil {
			if !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("Compose error %v does not wrap ErrOutOfRange", err)
			}
			return
		}
		if id < 0 {
			t.Fatalf("%+v Compose(%d, %d, %d) = %d: sign bit set", l, unixMs, shard, seq, id)
		}
		p, err := l.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != id || p.UnixMs != unixMs || p.Shard != shard || p.Seq != seq || !p.Time.Equal(time.UnixMilli(unixMs)) {
			t.Fatalf("%+v Decode(Compose(%d, %d, %d)) = %+v", l, unixMs, shard, seq, p)
		}
		if l.SeqOf(p.Counter, p.Slot) != seq || p.Slot >= l.Slots() {
			t.Fatalf("%+v seq %d split into counter %d slot %d", l, seq, p.Counter, p.Slot)
		}
		if s, err := l.ShardOf(id); err != nil || s != shard {
			t.Fatalf("ShardOf = %d, %v", s, err)
		}
		if l.UnixMsOf(id) != unixMs {
			t.Fatalf("UnixMsOf = %d", l.UnixMsOf(id))
		}
		if m := l.MinIDAt(unixMs); m > id {
			t.Fatalf("MinIDAt(%d) = %d > %d", unixMs, m, id)
		}
	})
}
