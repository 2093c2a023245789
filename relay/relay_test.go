package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(peerChildEnv); path != "" {
		os.Exit(peerChild(path))
	}
	pgtest.Main(m, 1)
}

const testShards = 16

// env is a catalog, a relay following it on a Unix socket, and the
// socket's path.
type env struct {
	cat    *catalog.Catalog
	sock   string
	server *Server
	stop   func() // stops the relay (its router and its server)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	se := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: testShards})
	e := &env{cat: se.Catalog, sock: filepath.Join(t.TempDir(), "relay.sock")}
	e.start(t)
	return e
}

// start runs a relay on e.sock until e.stop or the test's end.
func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := Listen(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	s, wait, err := Start(ctx, e.cat, l, router.WatchOptions{Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	e.server = s
	stopped := false
	e.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := wait(); err != nil {
				t.Errorf("relay: %v", err)
			}
		}
	}
	t.Cleanup(e.stop)
}

// watching returns a router on the relay, kept current by listening.
func (e *env) watching(t *testing.T) *router.Router {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := Dial(e.sock)
	r, err := router.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.WatchWith(ctx, router.WatchOptions{Listen: true}) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	return r
}

// sameMap fails the test unless got is the catalog's own map, read
// directly: version, shard count, layout, servers with their DSNs, and
// every placement.
func sameMap(t *testing.T, cat *catalog.Catalog, got *router.Snapshot) {
	t.Helper()
	want, err := cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != want.Version || got.Shards != want.Shards || got.Layout != want.Layout {
		t.Fatalf("relay map v%d, %d shards, layout %+v; catalog v%d, %d shards, layout %+v",
			got.Version, got.Shards, got.Layout, want.Version, want.Shards, want.Layout)
	}
	if !reflect.DeepEqual(got.Servers(), want.Servers()) {
		t.Fatalf("relay servers %+v, catalog %+v", got.Servers(), want.Servers())
	}
	if !reflect.DeepEqual(got.Placements(), want.Placements()) {
		t.Fatalf("relay placements differ from the catalog's at v%d:\n%+v\n%+v", got.Version, got.Placements(), want.Placements())
	}
}

// TestRouterFollowsCatalogThroughRelay changes the map in the catalog,
// one kind of change after another, and checks after each that a router
// on the relay serves exactly the catalog's map.
func TestRouterFollowsCatalogThroughRelay(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := e.watching(t)
	sameMap(t, e.cat, r.Snapshot())
	changes := []func() error{
		func() error {
			return e.cat.Moves().SetShardState(ctx, 3, placed(t, e.cat, 3), router.StateMoving)
		},
		func() error {
			return e.cat.Moves().SetShardState(ctx, 3, placed(t, e.cat, 3), router.StateFenced)
		},
		func() error {
			return e.cat.Moves().FlipShard(ctx, 3, placed(t, e.cat, 3), other(placed(t, e.cat, 3)))
		},
		func() error {
			_, err := e.cat.PlaceShard(ctx, 7, other(placed(t, e.cat, 7)), router.StateActive)
			return err
		},
		func() error {
			return e.cat.Moves().SetShardState(ctx, 0, placed(t, e.cat, 0), router.StateMoving)
		},
	}
	for i, change := range changes {
		if err := change(); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		caughtUp(t, e.cat, r.Snapshot)
		sameMap(t, e.cat, r.Snapshot())
	}
}

// TestDeltaOrWholeMap checks what a client holding an old version gets:
// the changed placements applied to it while the relay holds that
// version, the whole map once it no longer does, and its own snapshot
// when nothing is newer.
func TestDeltaOrWholeMap(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := Dial(e.sock)
	defer c.Close()
	old, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.LoadChanges(ctx, old)
	if err != nil || same != old {
		t.Fatalf("nothing newer: got %p, %v; want the snapshot held", same, err)
	}
	flips := history + 5
	for i := range flips {
		shard := i % testShards
		if _, err := e.cat.PlaceShard(ctx, shard, other(placed(t, e.cat, shard)), router.StateActive); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Held by the relay: a delta from old.
			caughtUp(t, e.cat, e.server.newest)
			next, err := c.LoadChanges(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			sameMap(t, e.cat, next)
		}
	}
	caughtUp(t, e.cat, e.server.newest)
	// old is out of the relay's history now: the whole map comes back.
	got, err := c.LoadChanges(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	sameMap(t, e.cat, got)
}

// TestListenerWakesOnChange checks that a waiting request returns with
// the new version when the map changes, long before its wait ends, and
// that a request with nothing newer waits its time out.
func TestListenerWakesOnChange(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	c := Dial(e.sock)
	defer c.Close()
	l, err := c.ListenMap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.mapAfter(ctx, c.base(), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("a request with nothing newer returned after %v, before its wait", waited)
	}
	got := make(chan string, 1)
	go func() {
		n, err := l.WaitForNotification(ctx)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- n.Payload
	}()
	if err := e.cat.Moves().SetShardState(ctx, 1, placed(t, e.cat, 1), router.StateMoving); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if want := fmt.Sprint(version(t, e.cat)); p != want {
			t.Fatalf("notified of %q, want version %s", p, want)
		}
	case <-time.After(longPoll - time.Second):
		t.Fatal("the listener did not wake on a map change")
	}
}

// TestRouterSurvivesRelayRestart stops the relay, changes the map, starts
// the relay again, and checks that the router, which kept its map
// meanwhile, comes to the new version.
func TestRouterSurvivesRelayRestart(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r := e.watching(t)
	held := r.Snapshot().Version
	e.stop()
	if _, err := e.cat.PlaceShard(ctx, 5, other(placed(t, e.cat, 5)), router.StateActive); err != nil {
		t.Fatal(err)
	}
	if v := r.Snapshot().Version; v != held {
		t.Fatalf("router went from v%d to v%d with the relay stopped", held, v)
	}
	e.start(t)
	caughtUp(t, e.cat, r.Snapshot)
	sameMap(t, e.cat, r.Snapshot())
}

// TestErrors covers what a user can get wrong: no relay at the path, a
// path in use or not a socket, and requests out of the protocol.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)

	nobody := Dial(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := nobody.Load(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no relay: got %v, want ErrUnavailable", err)
	}
	if _, err := router.New(ctx, nobody); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("router on no relay: got %v, want ErrUnavailable", err)
	}
	if _, err := Listen(e.sock); !errors.Is(err, ErrInUse) {
		t.Fatalf("listen where a relay answers: got %v, want ErrInUse", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil {
		t.Fatal("listen on a regular file: no error")
	}
	if fi, err := os.Stat(e.sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}

	c := Dial(e.sock)
	defer c.Close()
	for _, bad := range []string{"/v1/map?wait=2h", "/v1/version?after=-1", "/v1/map?since=x", "/v2/map"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://relay"+bad, nil)
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: status %d, want 400 or 404", bad, resp.StatusCode)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://relay/v1/map", nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: status %d, want 405", resp.StatusCode)
	}
}

func placed(t *testing.T, cat *catalog.Catalog, shard int) string {
	t.Helper()
	server, _, err := cat.Placement(context.Background(), shard)
	if err != nil {
		t.Fatal(err)
	}
	return server
}

func other(server string) string { return map[string]string{"a": "b", "b": "a"}[server] }

// caughtUp waits until the map that held returns is at the catalog's
// version.
func caughtUp(t *testing.T, cat *catalog.Catalog, held func() *router.Snapshot) {
	t.Helper()
	v := version(t, cat)
	testkit.Eventually(t, 30*time.Second, func() bool { return held().Version >= v })
}

func version(t *testing.T, cat *catalog.Catalog) int64 {
	t.Helper()
	v, err := cat.MapVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
