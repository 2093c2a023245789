package rebalance

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// TestMoveUsesAdminDSN: with every server's app DSN pointing at a port
// nothing listens on (a pooler that is down, say) and its admin DSN
// direct, a move preflights, copies, cuts over, verifies and completes,
// and both subscriptions connect with the admin DSN.
func TestMoveUsesAdminDSN(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shards 0,1 on s0; 2,3 on s1
	seedPhotos(t, e, 0, 500)
	for i, s := range e.servers {
		app := fmt.Sprintf("postgres://postgres@127.0.0.1:1/app%d?sslmode=disable&connect_timeout=1", i)
		admin := s.DSN + "&application_name=admin_" + s.Name
		err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
			return tx.SetServerDSN(ctx, s.Name, app, admin)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mv := e.mover(t, Config{})
	r, err := mv.Preflight(ctx, 0, "s1", MoveOptions{})
	if err == nil {
		err = r.err()
	}
	if err != nil {
		t.Fatalf("preflight: %v", err)
	}
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateReversible {
		t.Fatalf("move ended %s at %s", m.State, m.Step)
	}
	// The reverse subscription, kept for rollback, lives on the source and
	// connects to the target.
	var conninfo string
	if err := e.pools["s0"].QueryRow(ctx, `SELECT subconninfo FROM pg_subscription
		WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&conninfo); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(conninfo, "admin_s1") || strings.Contains(conninfo, "port='1'") {
		t.Fatalf("reverse subscription connects with %q, want s1's admin DSN", conninfo)
	}
	if _, err := mv.Verify(ctx, 0); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM shard_0000.photos`).Scan(&n); err != nil || n != 500 {
		t.Fatalf("%d rows on s1 after the move (%v), want 500", n, err)
	}
	if p := e.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
		t.Fatalf("shard 0 placed %+v", p)
	}
	if left := e.leftovers(t); len(left) > 0 {
		t.Fatalf("left after the move: %v", left)
	}
}
