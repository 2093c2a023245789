package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/router"
)

// serveFixed runs a relay that serves snap as the map of catalog id, on a
// socket of its own, until the test ends, and returns its path and its
// router (to give it later versions with Set).
func serveFixed(t *testing.T, snap *router.Snapshot, id string) (string, *router.Router) {
	t.Helper()
	r, err := router.NewFixed(snap)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "relay.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(r, id)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- s.Run(ctx) }()
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return path, r
}

// servedAt waits until the relay at path serves version v: a relay takes
// its source's snapshot from its own watch, after Set returns.
func servedAt(t *testing.T, path string, v int64) {
	t.Helper()
	plain := Dial(path)
	defer plain.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := plain.Load(context.Background())
		if err == nil && snap.Version == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay does not serve version %d: %v, %v", v, snap, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// forged returns a copy of snap at version v whose server name has dsn.
func forged(t *testing.T, snap *router.Snapshot, v int64, name, dsn string) *router.Snapshot {
	t.Helper()
	return forgedWith(t, snap, v, name, func(s *router.Server) { s.DSN = dsn })
}

// forgedWith returns a copy of snap at version v whose server name is
// changed by change.
func forgedWith(t *testing.T, snap *router.Snapshot, v int64, name string, change func(*router.Server)) *router.Snapshot {
	t.Helper()
	servers := snap.Servers()
	for i := range servers {
		if servers[i].Name == name {
			change(&servers[i])
		}
	}
	s, err := router.NewSnapshot(v, snap.Shards, servers, snap.Placements())
	if err != nil {
		t.Fatal(err)
	}
	s.Layout, s.CatalogEpoch = snap.Layout, snap.CatalogEpoch
	return s
}

// TestForeignMapsRefused: a client that knows its catalog refuses, with
// a typed error, what a relay serves that is not its catalog's map: the
// map of another catalog, a version the catalog does not hold (one past
// it, or far past), a server's DSN, replicas or primary replaced; and keeps its map when a
// relay it follows jumps ahead. The catalog's own map, served the same
// way, is taken; a client that checks nothing takes the forged ones too,
// as every client did before maps carried their catalog. The client
// reads the catalog as the application role, which may read no admin DSN.
func TestForeignMapsRefused(t *testing.T) {
	ctx := context.Background()
	se := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: testShards})
	cat, err := catalog.Open(ctx, shardtest.AppDSN(t, se.CatalogDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	st, err := cat.Stamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	genuine, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const elsewhere = "postgres://attacker.example/db"
	tests := []struct {
		name     string
		snap     *router.Snapshot
		id       string
		want     error // nil: taken
		unsigned bool  // a client that checks nothing takes it
	}{
		{"the catalog's map", genuine, st.ID, nil, true},
		{"another catalog's map", genuine, "5c0c6ad0-2f2f-4b8e-9d3a-000000000000", ErrOtherCatalog, true},
		{"a map without a catalog", genuine, "", ErrOtherCatalog, true},
		{"one version past the catalog's", forged(t, genuine, st.Version+1, "a", genuine.Servers()[0].DSN), st.ID, ErrVersionAhead, true},
		{"a version far past the catalog's", forged(t, genuine, 1<<39, "a", genuine.Servers()[0].DSN), st.ID, ErrVersionAhead, true},
		{"a server's DSN replaced", forged(t, genuine, st.Version, "a", elsewhere), st.ID, ErrServersDiffer, true},
		{"a server's replicas replaced", forgedWith(t, genuine, st.Version, "a", func(s *router.Server) { s.Replicas = []string{elsewhere} }), st.ID, ErrServersDiffer, true},
		{"a server's primary replaced", forgedWith(t, genuine, st.Version, "b", func(s *router.Server) {
			s.Primary = router.Primary{SystemID: "7000000000000000001", Timeline: 1}
		}), st.ID, ErrServersDiffer, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, _ := serveFixed(t, tt.snap, tt.id)
			for _, o := range []Options{{Catalog: cat}, {CatalogID: st.ID}} {
				if o.Catalog == nil && (errors.Is(tt.want, ErrVersionAhead) || errors.Is(tt.want, ErrServersDiffer)) {
					continue // only the catalog can tell
				}
				c, err := DialWith(path, o)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = router.New(ctx, c)
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("a router on it, checking against %s: %v; want %v", map[bool]string{true: "the catalog", false: "its id"}[o.Catalog != nil], err, tt.want)
				}
			}
			plain := Dial(path)
			defer plain.Close()
			if _, err := plain.Load(ctx); (err == nil) != tt.unsigned {
				t.Fatalf("a client that checks nothing: %v", err)
			}
		})
	}

	// A relay the client follows serves the catalog's map, then, once the
	// catalog is at the next version, that version with a DSN replaced,
	// then a version far ahead: the client keeps its map.
	path, src := serveFixed(t, genuine, st.ID)
	c, err := DialWith(path, Options{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := se.Catalog.PlaceShard(ctx, 3, other(placed(t, se.Catalog, 3)), router.StateActive); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		next *router.Snapshot
		want error
	}{
		{forged(t, genuine, genuine.Version+1, "b", elsewhere), ErrServersDiffer},
		{forged(t, genuine, genuine.Version+1000, "a", genuine.Servers()[0].DSN), ErrVersionAhead},
	} {
		src.Set(step.next)
		servedAt(t, path, step.next.Version)
		got, err := c.LoadChanges(ctx, held)
		if !errors.Is(err, step.want) || got != held {
			t.Fatalf("the relay went to v%d: the client has %v (%v), want its v%d and %v", step.next.Version, got, err, held.Version, step.want)
		}
	}
}

// TestForeignMapsRefusedCheaply measures what a refusal costs: a reply of
// 8 MiB of empty placements of another catalog, or of a version ahead of
// the catalog's, is refused before its lists are decoded (about its own
// size allocated, the undecoded lists, where decoding them would cost
// tens of times as much), and a whole map of 8192 shards with a server's
// DSN replaced before its placements are.
func TestForeignMapsRefusedCheaply(t *testing.T) {
	ctx := context.Background()
	se := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: testShards})
	st, err := se.Catalog.Stamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	huge := func(id string, v int64) []byte {
		head := fmt.Sprintf(`{"catalog":%q,"version":%d,"shards":8192,"layout":{"epoch_ms":1314220021721,"time_bits":41,"shard_bits":13,"seq_bits":10,"slot_bits":6},"servers":[],"placements":[`, id, v)
		const size = 8 << 20
		body := make([]byte, 0, size)
		body = append(body, head...)
		for len(body) < size-16 {
			body = append(body, "{},"...)
		}
		return append(body, "{}]}"...)
	}
	// A whole map of 8192 shards on the catalog's servers, but for a DSN.
	big := testSnapshot(t, st.Version, 8192)
	servers := make([]router.Server, len(st.Servers))
	copy(servers, st.Servers)
	servers[0].DSN = "postgres://attacker.example/db"
	ps := big.Placements()
	for i := range ps {
		ps[i].Server = servers[i%len(servers)].Name
	}
	fake, err := router.NewSnapshot(st.Version, 8192, servers, ps)
	if err != nil {
		t.Fatal(err)
	}
	fake.Layout = big.Layout
	dsnBody, _ := json.Marshal(fullMap(fake, st.ID))

	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"another catalog", huge("5c0c6ad0-2f2f-4b8e-9d3a-000000000000", st.Version), ErrOtherCatalog},
		{"a version ahead", huge(st.ID, st.Version+1), ErrVersionAhead},
		{"a server's DSN replaced", dsnBody, ErrServersDiffer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DialWith("/nonexistent.sock", Options{Catalog: se.Catalog})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := se.Catalog.Stamp(ctx); err != nil { // the pool warmed, as a client's would be
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = c.accept(ctx, tt.body, nil)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("refusing a %d KiB reply allocated %d KiB", len(tt.body)>>10, allocated>>10)
			if allocated > 3*uint64(len(tt.body))+(256<<10) {
				t.Fatalf("refusing a %d KiB reply allocated %d KiB", len(tt.body)>>10, allocated>>10)
			}
		})
	}
	// What taking such a map costs, for comparison: the same whole map
	// with the catalog's DSNs.
	var before, after runtime.MemStats
	good, _ := json.Marshal(fullMap(forged(t, fake, st.Version, servers[0].Name, st.Servers[0].DSN), st.ID))
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := decodeMap(good, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	t.Logf("taking the %d KiB map allocates %d KiB", len(good)>>10, (after.TotalAlloc-before.TotalAlloc)>>10)
}
