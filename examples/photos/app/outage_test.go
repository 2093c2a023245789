package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// catalogOutage is how long TestCatalogOutage keeps the catalog stopped:
// longer than an ID slot lease lasts without renewal (catalog.DefaultLeaseTTL
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
		db := pgtest.NewDatabase(t, i+1)
		cfg.Servers = append(cfg.Servers, migrations.ServerSpec{Name: name, DSN: shardtest.AppDSN(t, db), AdminDSN: db})
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if err := app.Provision(ctx, cfg, log); err != nil { // as the operator
		t.Fatalf("provision: %v", err)
	}
	f := serve(t, asApp(t, cfg), log)
	snap := f.app.Router.Snapshot()

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

// TestServerOutage stops the cluster of server beta: requests for beta's
// users answer 503 with Retry-After and a JSON error naming the server,
// alpha's users are served as before, and a feed that follows users on
// both servers returns alpha's photos and lists beta's shards as
// missing. When beta is back, everything answers again without restart.
func TestServerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a cluster")
	}
	ctx := context.Background()
	set := pgtest.Set(t)
	c, err := set.Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	betaDSN := pgtest.NewDatabase(t, len(set.Clusters)-1)
	f := newFixtureOn(t, 16, func(s string) string {
		if s == "beta" {
			return betaDSN
		}
		return ""
	})
	users := f.createUsers(t) // alpha's, beta's
	alpha, beta := users[0], users[1]
	// The follower lives on alpha, so its following list stays readable.
	var follower userJSON
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatal("64 users and none on alpha")
		}
		f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": fmt.Sprintf("follower %d", i)}, &follower)
		if _, server := f.home(t, id(t, follower.ID)); server == "alpha" {
			break
		}
	}
	for _, u := range users {
		f.mustCall(t, http.StatusCreated, "POST", "/users/"+follower.ID+"/follows", map[string]string{"followee_id": u.ID}, nil)
		f.mustCall(t, http.StatusCreated, "POST", "/users/"+u.ID+"/photos", map[string]any{"caption": "by " + u.Name, "url": "https://example.com/p.jpg", "width": 10, "height": 10}, nil)
	}
	var feed pageJSON[photoJSON]
	f.mustCall(t, http.StatusOK, "GET", "/users/"+follower.ID+"/feed", nil, &feed)
	if len(feed.Items) != 2 {
		t.Fatalf("feed before the outage: %d photos, want 2", len(feed.Items))
	}
	betaShard, _ := f.home(t, id(t, beta.ID))

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	code, body := f.raw(t, "GET", "/users/"+beta.ID, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "server beta unavailable") {
		t.Fatalf("GET beta's user while beta is down: %d %s, want 503 naming server beta", code, body)
	}
	req, _ := http.NewRequest("GET", f.url+"/users/"+beta.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET beta's user: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, body := f.raw(t, "POST", "/users/"+beta.ID+"/photos", []byte(`{"caption":"x","url":"https://example.com/x.jpg","width":1,"height":1}`)); code != http.StatusServiceUnavailable {
		t.Fatalf("upload for beta's user while beta is down: %d %s, want 503", code, body)
	}
	f.mustCall(t, http.StatusOK, "GET", "/users/"+alpha.ID, nil, nil)
	f.mustCall(t, http.StatusCreated, "POST", "/users/"+alpha.ID+"/photos", map[string]any{"caption": "during", "url": "https://example.com/d.jpg", "width": 1, "height": 1}, nil)

	var partial struct {
		pageJSON[photoJSON]
		MissingShards []int `json:"missing_shards"`
	}
	f.mustCall(t, http.StatusOK, "GET", "/users/"+follower.ID+"/feed", nil, &partial)
	if len(partial.Items) != 2 || !slices.Contains(partial.MissingShards, betaShard) {
		t.Fatalf("feed while beta is down: %d photos, missing shards %v; want alpha's 2 photos and beta's shard %d missing", len(partial.Items), partial.MissingShards, betaShard)
	}
	for _, p := range partial.Items {
		if p.UserID != alpha.ID {
			t.Fatalf("feed while beta is down holds a photo of user %s", p.UserID)
		}
	}

	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testkit.Until(t, 60*time.Second, func() error {
		code, body := f.raw(t, "GET", "/users/"+beta.ID, nil)
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("GET beta's user after restart: %d %s", code, body)
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET beta's user: %d %s", code, body)
		}
		return nil
	})
	t.Logf("beta answered %v after its restart", time.Since(back).Round(time.Millisecond))
	partial.MissingShards = nil
	f.mustCall(t, http.StatusOK, "GET", "/users/"+follower.ID+"/feed", nil, &partial)
	if len(partial.Items) != 3 || len(partial.MissingShards) != 0 {
		t.Fatalf("feed after restart: %d photos, missing %v; want 3, none", len(partial.Items), partial.MissingShards)
	}
}
