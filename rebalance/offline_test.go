package rebalance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/migrations"
)

// TestOfflineMoveWithoutLogicalWAL moves a shard onto a server whose
// wal_level is replica: the online move is refused with ErrNotLogical, the
// offline one fences, copies, verifies and flips, with writers running.
func TestOfflineMoveWithoutLogicalWAL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster without logical WAL for one sequential move (the first make test stage runs it)")
	}
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4)
	c, err := pgtest.Set(t).Add(ctx, pglocal.Options{Settings: map[string]string{"wal_level": "replica"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	pgtest.Exec(t, c.DSN("postgres"), `CREATE DATABASE plain`)
	plain := migrations.ServerSpec{Name: "plain", DSN: c.DSN("plain")}
	e.servers = append(e.servers, plain)
	if err := migrations.Provision(ctx, e.cat, migrations.ProvisionOptions{Servers: e.servers, Shards: 4, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.New(ctx, plain.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e.pools["plain"] = p
	seedPhotos(t, e, 2, 5000)

	mv := e.mover(t, Config{})
	if _, err := mv.Move(ctx, 2, "plain", MoveOptions{}); !errors.Is(err, ErrNotLogical) {
		t.Fatalf("online move onto wal_level=replica: err = %v, want ErrNotLogical", err)
	} else if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "server plain") {
		t.Errorf("refused online move: err = %v, want a preflight failure naming server plain", err)
	}
	if e.schemaOn(t, "plain", 2) {
		t.Error("the refused online move left shard_0002 on plain")
	}
	w := newRawWriter(t, e, []int{2, 3})
	stop := w.run(ctx)
	time.Sleep(200 * time.Millisecond)
	m, err := mv.Move(ctx, 2, "plain", MoveOptions{Offline: true})
	time.Sleep(200 * time.Millisecond)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateCompleted {
		t.Errorf("offline move ended %s", m.State)
	}
	w.check(t)
	if pl := e.placement(t, 2); pl.Server != "plain" {
		t.Errorf("shard 2 on %s, want plain", pl.Server)
	}
	if e.schemaOn(t, "s0", 2) || e.schemaOn(t, "s1", 2) {
		t.Error("old copy of shard 2 left behind")
	}
	t.Logf("offline move: fenced %v; writer %d ops, longest write %v", m.FencedFor, w.ops, w.maxWait)
}
