package idgen

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxBorrow          = 100 * time.Millisecond
	DefaultMaxClockRegression = time.Second
	// DefaultBulkSlots is Config.BulkSlots' default: 20 slots of 16 IDs per
	// ms per shard with the default layout, 320 IDs per ms for one shard
	// (a quarter of the format's 1024 with a margin; the rate is exact, set
	// by the clock, so 16 slots would measure 256 give or take a ms).
	DefaultBulkSlots = 20
	// DefaultBulkIdle is Config.BulkIdle's default.
	DefaultBulkIdle = 2 * time.Second
)

// Generator errors. Test with errors.Is.
var (
	// ErrClockMovedBackwards reports a clock that is behind the time the
	// generator already issued IDs for (or behind the slot's previous
	// holder) by more than Config.MaxClockRegression. The *ClockError that
	// wraps it says by how much.
	ErrClockMovedBackwards = errors.New("clock moved backwards")
	// ErrClosed reports a call to a Generator after Close.
	ErrClosed = errors.New("ID generator closed")
)

// ClockError reports a clock too far behind to wait out. Fix the host's
// time synchronisation, or raise Config.MaxClockRegression; meanwhile new
// rows can take their keys from the database's next_id().
type ClockError struct {
	Behind time.Duration // how far the clock is behind
	Of     string        // what it is behind: "IDs already issued", "the slot's previous holder"
	Limit  time.Duration // Config.MaxClockRegression
}

func (e *ClockError) Error() string {
	return fmt.Sprintf("shardkit: %v: the clock is %v behind %s (limit %v); fix the host's time sync or raise MaxClockRegression",
		ErrClockMovedBackwards, e.Behind, e.Of, e.Limit)
}

// Unwrap returns ErrClockMovedBackwards.
func (e *ClockError) Unwrap() error { return ErrClockMovedBackwards }

// Config tunes a Generator. The zero value is ready to use.
type Config struct {
	// MaxBorrow is how far ahead of the clock a burst may issue IDs once a
	// millisecond's counter is used up, instead of sleeping. Zero means
	// DefaultMaxBorrow; negative means never borrow.
	MaxBorrow time.Duration
	// MaxClockRegression is the largest backward clock step the generator
	// waits out; a larger one fails with ErrClockMovedBackwards. Zero means
	// DefaultMaxClockRegression.
	MaxClockRegression time.Duration
	// Clock is the time source. Nil means the system clock.
	Clock Clock
	// BulkSlots is the most slots a generator started with Start holds at
	// once, its own included, while Fills on one shard outrun its own slot
	// (see Fill): each slot adds 2^CounterBits IDs per ms for that shard.
	// The extra slots are leased from the generator's Leaser on demand, in
	// the background, and released after BulkIdle without bulk work; they
	// count against the slots other processes can lease. Zero means
	// DefaultBulkSlots; 1 or less turns extra slots off.
	BulkSlots int
	// BulkIdle is how long extra slots are kept without bulk work. Zero
	// means DefaultBulkIdle.
	BulkIdle time.Duration
}
