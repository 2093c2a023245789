package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

func TestLockSpacePredicate(t *testing.T) {
	full := &pgconn.PgError{Code: "53200", Message: "out of shared memory", Hint: "You might need to increase max_locks_per_transaction."}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"lock table full", full, true},
		{"wrapped", fmt.Errorf("read: %w", full), true},
		{"predicate locks", &pgconn.PgError{Code: "53200", Message: "out of shared memory", Hint: "You might need to increase max_pred_locks_per_transaction."}, false},
		{"no hint", &pgconn.PgError{Code: "53200", Message: "out of shared memory"}, false},
		{"other code", &pgconn.PgError{Code: "53100", Message: "could not extend file", Hint: "max_locks_per_transaction"}, false},
		{"not a server error", errors.New("out of shared memory"), false},
	} {
		if got := lockSpace(c.err); got != c.want {
			t.Errorf("%s: lockSpace = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReadAcrossShardsLockSpace fills server b's lock table (advisory locks
// held by another session, Postgres's smallest max_locks_per_transaction)
// but for a few entries, and reads every shard: the read, whose statement
// on b needs more entries than are left, fails with ErrServerLockSpace
// naming the server and wrapping Postgres's own error, while a read of one
// of b's shards, which needs few, still runs in the room left; with the
// locks released the same read across shards runs again. (A table full to
// the last entry fails nearly everything on the server, new connections
// and reads of one table too: docs/operations.md.)
func TestReadAcrossShardsLockSpace(t *testing.T) {
	ctx := context.Background()
	_, dsnOf := ownClusterForBWith(t, pglocal.Options{Settings: map[string]string{
		"max_locks_per_transaction": "10",
		"autovacuum":                "off", // nothing else takes the room the test leaves
	}})
	e := newEnv(t, envOpts{shards: 64, dsnOf: dsnOf})
	var onB []int // shards on server b
	for s := 0; s < e.shards; s++ {
		if e.serverOf(t, s) == "b" {
			onB = append(onB, s)
		}
	}
	if len(onB) < 24 {
		t.Fatalf("server b holds %d shards: want enough that one statement needs more locks than a backend takes without the lock table (16)", len(onB))
	}
	for u := int64(1); u <= int64(e.shards); u++ { // one row in every shard
		if err := e.db.Create(&Photo{UserID: u, Caption: "x"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	readAll := func() error {
		var ps []Photo
		err := e.db.Clauses(AllShards()).Order("id desc").Limit(10).Find(&ps).Error
		if err == nil && len(ps) != 10 {
			return fmt.Errorf("read %d rows, want 10", len(ps))
		}
		return err
	}
	if err := readAll(); err != nil {
		t.Fatalf("before the lock table fills: %v", err)
	}

	holder, err := pgx.Connect(ctx, dsnOf("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	// Session advisory locks stay held when the statement taking them
	// fails: this fills the lock table to the last entry, then frees a few,
	// fewer than the read's statement on b needs.
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock(g) FROM generate_series(1, 1000000) AS g")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "53200" {
		t.Fatalf("filling the lock table: %v, want out of shared memory (53200)", err)
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(g) FROM generate_series(1, 8) AS g"); err != nil {
		t.Fatal(err)
	}

	err = readAll()
	if !errors.Is(err, ErrServerLockSpace) {
		t.Fatalf("read across shards with b's lock table full: %v, want ErrServerLockSpace", err)
	}
	if !errors.As(err, &pe) || pe.Code != "53200" {
		t.Fatalf("error %v does not wrap Postgres's (53200)", err)
	}
	if !strings.Contains(err.Error(), "server b") || !strings.Contains(err.Error(), "max_locks_per_transaction") {
		t.Fatalf("error %q does not name the server and the setting", err)
	}
	t.Logf("the read's error: %v", err)
	if errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("error %v says the server is unavailable; it answered", err)
	}
	user := onB[0] // the user whose row is in b's first shard (user 0 is none: shard 0's row is user 64's)
	if user == 0 {
		user = e.shards
	}
	var one []Photo
	if err := e.db.Where("user_id = ?", user).Find(&one).Error; err != nil || len(one) != 1 {
		t.Fatalf("read of one of b's shards with its lock table full: %d rows, %v; want 1 row", len(one), err)
	}

	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	if err := readAll(); err != nil {
		t.Fatalf("after the locks are released: %v", err)
	}
}
