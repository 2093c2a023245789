package idgen

import (
	"errors"
	"fmt"
	"time"
)

// DefaultEpochMs is Instagram's epoch: 2011-08-24T21:07:01.721Z.
const DefaultEpochMs int64 = 1314220021721

// Default layout values: Instagram's own, plus 6 slot bits.
const (
	DefaultTimeBits  = 41
	DefaultShardBits = 13
	DefaultSeqBits   = 10
	DefaultSlotBits  = 6
	DefaultShards    = 2000
)

// Sentinel errors. Each is wrapped with context; test with errors.Is.
var (
	// ErrInvalidLayout reports a layout whose bit widths or epoch are unusable.
	ErrInvalidLayout = errors.New("invalid ID layout")
	// ErrInvalidID reports an ID that cannot have been made under the layout
	// (negative: the sign bit is set).
	ErrInvalidID = errors.New("invalid ID")
	// ErrOutOfRange reports a component (time, shard, sequence) that does not fit its bits.
	ErrOutOfRange = errors.New("ID component out of range")
)

// Layout describes how a 64-bit ID (a Postgres bigint) is split:
//
//	[TimeBits: ms since EpochMs][ShardBits: logical shard][SeqBits: sequence]
//
// As in Instagram's scheme the three fields fill all 64 bits, so the top
// time bit is the sign bit: it stays 0 and IDs are positive, which leaves
// 2^(TimeBits-1) ms of time (about 34.8 years for 41 bits).
//
// and how the sequence is split again into [counter | slot], with SlotBits
// low bits naming the issuing slot. Slot 0 belongs to the database's
// next_id() function; application processes lease slots 1..2^SlotBits-1.
//
// The zero Layout is not valid; start from DefaultLayout.
type Layout struct {
	EpochMs   int64 // unix ms of ID time zero
	TimeBits  uint8 // bits of milliseconds since EpochMs
	ShardBits uint8 // bits of logical shard number
	SeqBits   uint8 // bits of sequence (counter and slot)
	SlotBits  uint8 // low bits of the sequence that name the issuing slot; 0 disables slots
}

// DefaultLayout returns Instagram's layout (41/13/10, epoch 1314220021721)
// with 6 slot bits: 63 application slots, 16 IDs per ms per shard each.
func DefaultLayout() Layout {
	return Layout{
		EpochMs:   DefaultEpochMs,
		TimeBits:  DefaultTimeBits,
		ShardBits: DefaultShardBits,
		SeqBits:   DefaultSeqBits,
		SlotBits:  DefaultSlotBits,
	}
}

// Validate reports whether the layout is usable: the three fields sum to 64
// bits (time at least 2), each is at least 1 bit, the slot bits leave at least one counter bit,
// and the epoch is not in the future.
func (l Layout) Validate() error {
	return l.validateAt(time.Now())
}

func (l Layout) validateAt(now time.Time) error {
	if l.TimeBits == 0 || l.ShardBits == 0 || l.SeqBits == 0 {
		return fmt.Errorf("%w: every field needs at least one bit (time %d, shard %d, sequence %d)",
			ErrInvalidLayout, l.TimeBits, l.ShardBits, l.SeqBits)
	}
	if l.TimeBits < 2 {
		return fmt.Errorf("%w: %d time bits: the top one is the sign bit, so at least 2 are needed", ErrInvalidLayout, l.TimeBits)
	}
	if sum := int(l.TimeBits) + int(l.ShardBits) + int(l.SeqBits); sum != 64 {
		return fmt.Errorf("%w: time %d + shard %d + sequence %d bits = %d, want 64",
			ErrInvalidLayout, l.TimeBits, l.ShardBits, l.SeqBits, sum)
	}
	if l.SlotBits >= l.SeqBits {
		return fmt.Errorf("%w: %d slot bits leave no counter bits in a %d-bit sequence",
			ErrInvalidLayout, l.SlotBits, l.SeqBits)
	}
	if l.EpochMs < 0 {
		return fmt.Errorf("%w: epoch %d ms is before 1970", ErrInvalidLayout, l.EpochMs)
	}
	if l.EpochMs > now.UnixMilli() {
		return fmt.Errorf("%w: epoch %s is in the future", ErrInvalidLayout,
			time.UnixMilli(l.EpochMs).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// MaxShards is the number of logical shards the layout can address (2^ShardBits).
func (l Layout) MaxShards() int { return 1 << l.ShardBits }

// Slots is the number of slots, including slot 0 (2^SlotBits).
func (l Layout) Slots() int { return 1 << l.SlotBits }

// CounterBits is the number of sequence bits left for the per-ms counter.
func (l Layout) CounterBits() uint8 { return l.SeqBits - l.SlotBits }

// MaxTimeMs is the largest ms offset from the epoch the layout can hold
// in a positive ID: 2^(TimeBits-1)-1, since the top time bit is the sign bit.
func (l Layout) MaxTimeMs() int64 { return 1<<(l.TimeBits-1) - 1 }

// Parts is a decoded ID.
type Parts struct {
	ID      int64     `json:"id"`
	UnixMs  int64     `json:"unix_ms"`
	Time    time.Time `json:"time"`
	Shard   int       `json:"shard"`
	Seq     int       `json:"seq"`
	Slot    int       `json:"slot"`
	Counter int       `json:"counter"`
}

// Compose builds an ID from its unix ms time, logical shard and sequence.
// Each component must fit its bits, else the error wraps ErrOutOfRange.
func (l Layout) Compose(unixMs int64, shard, seq int) (int64, error) {
	ms := unixMs - l.EpochMs
	if ms < 0 || ms > l.MaxTimeMs() {
		return 0, fmt.Errorf("%w: time %d ms is outside the layout's range [%d, %d]",
			ErrOutOfRange, unixMs, l.EpochMs, l.EpochMs+l.MaxTimeMs())
	}
	if shard < 0 || shard >= l.MaxShards() {
		return 0, fmt.Errorf("%w: shard %d is outside [0, %d)", ErrOutOfRange, shard, l.MaxShards())
	}
	if seq < 0 || seq >= 1<<l.SeqBits {
		return 0, fmt.Errorf("%w: sequence %d is outside [0, %d)", ErrOutOfRange, seq, 1<<l.SeqBits)
	}
	return l.compose(ms, shard, seq), nil
}

// compose packs components already known to fit.
func (l Layout) compose(ms int64, shard, seq int) int64 {
	return ms<<(l.ShardBits+l.SeqBits) | int64(shard)<<l.SeqBits | int64(seq)
}

// SeqOf builds a sequence value from a counter and a slot.
func (l Layout) SeqOf(counter, slot int) int { return counter<<l.SlotBits | slot }

// Decode splits an ID into its parts. IDs with the sign bit set are refused
// with an error wrapping ErrInvalidID.
func (l Layout) Decode(id int64) (Parts, error) {
	if id < 0 {
		return Parts{}, fmt.Errorf("%w: %d has the sign bit set; shardkit IDs are positive 63-bit numbers", ErrInvalidID, id)
	}
	ms := id >> (l.ShardBits + l.SeqBits)
	shard := int(id>>l.SeqBits) & (1<<l.ShardBits - 1)
	seq := int(id) & (1<<l.SeqBits - 1)
	unix := ms + l.EpochMs
	return Parts{
		ID:      id,
		UnixMs:  unix,
		Time:    time.UnixMilli(unix).UTC(),
		Shard:   shard,
		Seq:     seq,
		Slot:    seq & (1<<l.SlotBits - 1),
		Counter: seq >> l.SlotBits,
	}, nil
}

// ShardOf returns the logical shard stored in an ID's shard bits.
func (l Layout) ShardOf(id int64) (int, error) {
	if id < 0 {
		return 0, fmt.Errorf("%w: %d has the sign bit set; shardkit IDs are positive 63-bit numbers", ErrInvalidID, id)
	}
	return int(id>>l.SeqBits) & (1<<l.ShardBits - 1), nil
}

// UnixMsOf returns the unix ms time stored in an ID. It does not check the sign bit.
func (l Layout) UnixMsOf(id int64) int64 { return id>>(l.ShardBits+l.SeqBits) + l.EpochMs }

// MinIDAt returns the smallest ID any shard can have at unix ms t: useful as
// a cursor bound ("everything created before t").
func (l Layout) MinIDAt(unixMs int64) int64 {
	ms := unixMs - l.EpochMs
	if ms < 0 {
		return 0
	}
	return ms << (l.ShardBits + l.SeqBits)
}
