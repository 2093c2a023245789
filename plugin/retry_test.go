package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"fenced", &ShardError{Shard: 3, Server: "a", Err: ErrShardFenced}, true},
		{"moved, wrapped twice", fmt.Errorf("save: %w", &ShardError{Shard: 3, Err: ErrShardMoved}), true},
		{"server unavailable", &ServerError{Server: "b", Shards: []int{1}, Err: errors.New("connection refused")}, true},
		{"server known down", &ServerError{Server: "b", Err: errKnownDown}, true},
		{"missing shard key", &ShardError{Shard: -1, Err: ErrMissingShardKey}, false},
		{"cross shard", &ShardError{Shard: 2, Err: ErrCrossShard}, false},
		{"unroutable", fmt.Errorf("%w: raw SQL", ErrUnroutableSQL), false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"caller's cancel", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Retryable(tt.err); got != tt.want {
				t.Fatalf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func ExampleRetryable() {
	err := fmt.Errorf("upload: %w", &ShardError{Shard: 1341, Server: "pg2", Err: ErrShardFenced})
	fmt.Println(Retryable(err))
	err = &ShardError{Shard: -1, Table: "photos", Err: ErrMissingShardKey}
	fmt.Println(Retryable(err))
	// Output:
	// true
	// false
}

// safeToRetry is a driver error that says it was never sent, as pgx's
// "conn closed" does.
type safeToRetry struct{}

func (safeToRetry) Error() string     { return "conn closed" }
func (safeToRetry) SafeToRetry() bool { return true }

// TestCommitNeverSafeToRetry: an error of a COMMIT never reports
// pgconn.SafeToRetry, whatever the driver says, since the commit may
// have been applied; a rollback's keeps the driver's answer.
func TestCommitNeverSafeToRetry(t *testing.T) {
	tx := &shardTx{shard: 3}
	for _, c := range []struct {
		what string
		err  error
		safe bool
	}{
		{"commit", safeToRetry{}, false},
		{"commit", fmt.Errorf("wrapped: %w", safeToRetry{}), false},
		{"commit", errors.New("boom"), false},
		{"rollback", safeToRetry{}, true},
	} {
		got := tx.txError("b", c.what, c.err)
		if pgconn.SafeToRetry(got) != c.safe {
			t.Errorf("%s failing with %v: SafeToRetry %v, want %v (%v)", c.what, c.err, !c.safe, c.safe, got)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s failing with %v: the driver's error is not in %v", c.what, c.err, got)
		}
	}
}
