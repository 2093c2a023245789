package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/internal/pglocal"
	"github.com/shardkit/shardkit/internal/pgtest"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// catalogOutage is how long TestCatalogOutage keeps the catalog stopped:
// longer than an ID slot lease lasts without renewal (router.DefaultLeaseTTL
// less its margin), so the lease surely lapses during the outage.
const catalogOutage = 10 * time.Second

// TestCatalogOutage stops the catalog's Postgres cluster for ten seconds
// while writers sign users up and upload photos. Routing works from the
// last shard map; once the ID slot lease lapses, new rows take their IDs
// from their shard's next_id() (slot 0). No write may fail, no ID may be
// issued twice, every row written must be in its shard, and when the
// catalog returns, IDs come from the process's own slot again.
func TestCatalogOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a cluster for ten seconds")
	}
	ctx := context.Background()
	// The catalog gets a cluster of its own, so stopping it stops nothing else.
	c, err := pgtest.Set(t).Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	const shards = 16
	cfg := app.Config{Catalog: store.CatalogDSN(c.DSN("postgres")), Shards: shards, FenceWait: store.FenceWait(2 * time.Second), Provision: true}
	for i, name := range serverNames {
		cfg.Servers = append(cfg.Servers, migrations.ServerSpec{Name: name, DSN: pgtest.NewDatabase(t, i+1)})
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if err := app.Provision(ctx, cfg, log); err != nil {
		t.Fatalf("provision: %v", err)
	}
	a, cleanup, err := app.Initialize(ctx, cfg, log)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	t.Cleanup(cleanup)
	srv := httptest.NewServer(a.Server.Handler)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, url: srv.URL, app: a, layout: a.Router.Snapshot().Layout}
	snap := a.Router.Snapshot()

	// Writers: each signs a user up and uploads a photo for it, in a loop.
	var (
		mu       sync.Mutex
		ids      = map[int64]string{} // every ID answered, with what it is
		failures []string
		phase    atomic.Int32 // 0 before, 1 during, 2 after the outage
		bySlot   [3]map[int]int
		written  = map[string]int{} // rows per table
	)
	for i := range bySlot {
		bySlot[i] = map[int]int{}
	}
	record := func(kind, sid string) {
		v := id(t, sid)
		p, err := f.layout.Decode(v)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s ID %d: %v", kind, v, err))
			return
		}
		if prev, dup := ids[v]; dup {
			failures = append(failures, fmt.Sprintf("ID %d issued twice (%s and %s)", v, prev, kind))
		}
		ids[v] = kind
		bySlot[phase.Load()][p.Slot]++
		written[kind]++
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var u userJSON
				if code := f.call(t, "POST", "/users", map[string]string{"name": fmt.Sprintf("w%d-%d", w, i)}, &u); code != http.StatusCreated {
					fail("phase %d: POST /users: %d", phase.Load(), code)
					continue
				}
				record("users", u.ID)
				var p photoJSON
				if code := f.call(t, "POST", "/users/"+u.ID+"/photos", map[string]any{"url": "https://img.example/o.jpg"}, &p); code != http.StatusCreated {
					fail("phase %d: POST photo: %d", phase.Load(), code)
					continue
				}
				record("photos", p.ID)
			}
		}()
	}
	finish := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(finish)
	count := func(ph int, appSlots bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for s, k := range bySlot[ph] {
			if (s != 0) == appSlots {
				n += k
			}
		}
		return n
	}

	for deadline := time.Now().Add(time.Minute); count(0, true) < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 20 IDs from an app slot in a minute (failures: %d)", len(failures))
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	phase.Store(1)
	stopped := time.Now()
	time.Sleep(catalogOutage) // the outage itself, not a wait for an event
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	phase.Store(2)
	t.Logf("catalog down for %s", time.Since(stopped).Round(time.Millisecond))
	// Issuing from the slot resumes once the lease is renewed (retried
	// every TTL/10); wait for it, then for a few more writes.
	for deadline := time.Now().Add(time.Minute); count(2, true) < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no IDs from an app slot a minute after the catalog returned (by slot: %v)", bySlot[2])
		}
	}
	finish()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("IDs by slot: before %v, during %v, after %v; rows %v", bySlot[0], bySlot[1], bySlot[2], written)
	if len(failures) > 0 {
		t.Fatalf("%d failed writes or bad IDs, first: %v", len(failures), failures[:min(5, len(failures))])
	}
	if bySlot[1][0] == 0 {
		t.Fatalf("no ID from next_id() (slot 0) during the outage: the lease never lapsed, the test proved nothing (by slot %v)", bySlot[1])
	}
	var before int
	for s := range bySlot[0] {
		before = s
	}
	if len(bySlot[0]) != 1 || before == 0 {
		t.Fatalf("before the outage IDs came from slots %v, want one app slot", bySlot[0])
	}
	for s := range bySlot[2] {
		if s != 0 && s != before {
			t.Errorf("after the outage IDs come from slot %d, want the slot held before, %d", s, before)
		}
	}
	// Every row answered is in its shard, once: direct count per table.
	for table, want := range written {
		got := 0
		for i := range serverNames {
			conn := pgtest.Connect(t, cfg.Servers[i].DSN)
			for shard := range shards {
				pl, err := snap.Placement(shard)
				if err != nil {
					t.Fatal(err)
				}
				if pl.Server != serverNames[i] {
					continue
				}
				var n int
				q := "SELECT count(*) FROM " + pgx.Identifier{router.SchemaName(shard), table}.Sanitize()
				if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
					t.Fatal(err)
				}
				got += n
			}
		}
		if got != want {
			t.Errorf("%s: %d rows in the shards, %d answered 201", table, got, want)
		}
	}
}
