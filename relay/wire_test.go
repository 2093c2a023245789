package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// testCatalogID is the identity the relays of unit tests serve.
const testCatalogID = "00000000-0000-4000-8000-000000000001"

// testSnapshot is a map of n shards over servers a and b, at version v.
func testSnapshot(t testing.TB, v int64, n int) *router.Snapshot {
	t.Helper()
	servers := []router.Server{{Name: "a", DSN: "postgres://a/db", State: "active"}, {Name: "b", DSN: "postgres://b/db", AdminDSN: "postgres://b-direct/db", State: "active",
		Primary: router.Primary{SystemID: "7420000000000000001", Timeline: 2}}}
	ps := make([]router.Placement, n)
	for i := range ps {
		ps[i] = router.Placement{Shard: i, Server: servers[i%2].Name, Schema: router.SchemaName(i), State: router.StateActive}
	}
	s, err := router.NewSnapshot(v, n, servers, ps)
	if err != nil {
		t.Fatal(err)
	}
	s.Layout = idgen.DefaultLayout()
	return s
}

// TestWireRoundTrip: a reply decodes to the map it was made from, except
// the admin DSN, which a relay never serves: the client learns only that
// the server has one (AdminHidden, so Admin is "", never the app DSN).
func TestWireRoundTrip(t *testing.T) {
	old := testSnapshot(t, 4, 8)
	ps := old.Placements()
	ps[3].Server, ps[5].State = "a", router.StateFenced
	cur, err := old.Next(7, old.Servers(), []router.Placement{ps[3], ps[5]})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		wire  wireMap
		since *router.Snapshot
		moved int // placements the reply carries
	}{
		{"whole map", fullMap(cur, testCatalogID), nil, 8},
		{"whole map to a client holding a version", fullMap(cur, testCatalogID), old, 8},
		{"delta", delta(old, cur, testCatalogID), old, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.wire.Placements) != tt.moved {
				t.Fatalf("reply carries %d placements, want %d", len(tt.wire.Placements), tt.moved)
			}
			b, err := json.Marshal(tt.wire)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "b-direct") {
				t.Fatalf("the reply carries an admin DSN: %s", b)
			}
			got, err := decodeMap(b, tt.since)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != cur.Version || got.Shards != cur.Shards || got.Layout != cur.Layout {
				t.Fatalf("got v%d %d shards %+v", got.Version, got.Shards, got.Layout)
			}
			for i, p := range cur.Placements() {
				if g, _ := got.Placement(i); g != p {
					t.Fatalf("shard %d: got %+v, want %+v", i, g, p)
				}
			}
			for _, s := range cur.Servers() {
				g, ok := got.Server(s.Name)
				if !ok || g.DSN != s.DSN || g.AdminDSN != "" || g.Direct() != s.Direct() || (!s.Direct() && g.Admin() != "") || g.Primary != s.Primary {
					t.Fatalf("server %s: got %+v, want %+v without its admin DSN", s.Name, g, s)
				}
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	held := testSnapshot(t, 4, 8)
	// A version a router would then never leave: refused, whole or delta.
	for _, v := range []int64{1 << 62, 4 + maxVersionStep + 1} {
		jump := fullMap(testSnapshot(t, v, 8), testCatalogID)
		b, _ := json.Marshal(jump)
		if _, err := decodeMap(b, held); !errors.Is(err, ErrBadReply) {
			t.Errorf("a whole map at version %d to a client at 4: %v", v, err)
		}
		d := delta(held, testSnapshot(t, v, 8), testCatalogID)
		b, _ = json.Marshal(d)
		if _, err := decodeMap(b, held); !errors.Is(err, ErrBadReply) {
			t.Errorf("a delta to version %d from 4: %v", v, err)
		}
	}
	b, _ := json.Marshal(fullMap(testSnapshot(t, 1<<62, 8), testCatalogID))
	if _, err := decodeMap(b, nil); !errors.Is(err, ErrBadReply) {
		t.Errorf("a first map at version 2^62: %v", err)
	}
	whole, _ := json.Marshal(fullMap(held, testCatalogID))
	tests := []struct {
		name  string
		body  string
		since *router.Snapshot
	}{
		{"not JSON", "<html>", nil},
		{"no version", `{"shards":8,"servers":[],"placements":[]}`, nil},
		{"whole map without layout", `{"version":5,"shards":1,"servers":[{"name":"a","dsn":"x","state":"active"}],"placements":[{"shard":0,"server":"a","schema":"shard_0000","state":"active"}]}`, nil},
		{"delta from another version", `{"version":9,"since":3,"servers":[{"name":"a","dsn":"x","state":"active"},{"name":"b","dsn":"y","state":"active"}],"placements":[]}`, held},
		{"delta without a version held", `{"version":9,"since":4,"servers":[],"placements":[]}`, nil},
		{"delta backwards", `{"version":4,"since":4,"servers":[{"name":"a","dsn":"x","state":"active"},{"name":"b","dsn":"y","state":"active"}],"placements":[]}`, held},
		{"delta onto an unknown server", `{"version":5,"since":4,"servers":[{"name":"a","dsn":"x","state":"active"},{"name":"b","dsn":"y","state":"active"}],"placements":[{"shard":1,"server":"c","schema":"shard_0001","state":"active"}]}`, held},
		{"delta dropping a server in use", `{"version":5,"since":4,"servers":[{"name":"a","dsn":"x","state":"active"}],"placements":[]}`, held},
		{"bad state", `{"version":5,"since":4,"servers":[{"name":"a","dsn":"x","state":"active"},{"name":"b","dsn":"y","state":"active"}],"placements":[{"shard":1,"server":"a","schema":"shard_0001","state":"gone"}]}`, held},
		{"shard count over the layout", string(whole[:len(whole)-1]) + `,"shards":99999}`, nil},
		{"shard count over the placements sent", `{"version":5,"shards":1099511627776,"layout":{"epoch_ms":1314220021721,"time_bits":2,"shard_bits":50,"seq_bits":12,"slot_bits":0},"servers":[],"placements":[]}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeMap([]byte(tt.body), tt.since); !errors.Is(err, ErrBadReply) {
				t.Fatalf("got %v, want ErrBadReply", err)
			}
		})
	}
}

// FuzzDecodeMap feeds the relay client's decoder arbitrary replies: it
// must never panic, and a snapshot it accepts is a valid map (every shard
// placed, on a known server) of a version past the one held.
func FuzzDecodeMap(f *testing.F) {
	held := testSnapshot(f, 4, 8)
	ps := held.Placements()
	ps[2].Server = "a"
	cur, _ := held.Next(6, held.Servers(), []router.Placement{ps[2]})
	for _, w := range []wireMap{fullMap(held, testCatalogID), fullMap(cur, testCatalogID), delta(held, cur, testCatalogID)} {
		b, _ := json.Marshal(w)
		f.Add(b, true)
		f.Add(b, false)
	}
	f.Add([]byte(`{"version":5,"since":4,"servers":[],"placements":[{"shard":-1}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, holding bool) {
		var since *router.Snapshot
		if holding {
			since = held
		}
		s, err := decodeMap(body, since)
		if err != nil {
			if !errors.Is(err, ErrBadReply) {
				t.Fatalf("error not ErrBadReply: %v", err)
			}
			return
		}
		if s.Version <= 0 || s.Shards <= 0 || len(s.Placements()) != s.Shards {
			t.Fatalf("accepted v%d with %d shards, %d placements", s.Version, s.Shards, len(s.Placements()))
		}
		if since != nil && s.Shards == since.Shards && s.Version < since.Version {
			t.Fatalf("accepted version %d, older than the %d held", s.Version, since.Version)
		}
		for _, p := range s.Placements() {
			if _, ok := s.Server(p.Server); !ok || !p.State.Valid() {
				t.Fatalf("accepted placement %+v", p)
			}
		}
		if err := s.Layout.Validate(); err != nil {
			t.Fatalf("accepted layout %+v: %v", s.Layout, err)
		}
	})
}

// TestServerAnswers drives the relay's handler without a socket: the
// whole map, a delta from a version it holds, the whole map for one it
// does not, 304 when nothing is newer, and a cache that stays one reply
// per version held whatever versions clients name.
func TestServerAnswers(t *testing.T) {
	first := testSnapshot(t, 1, 8)
	r, err := router.NewFixed(first)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(r, testCatalogID)
	ps := first.Placements()
	ps[5].Server = "a"
	second, _ := first.Next(2, first.Servers(), []router.Placement{ps[5]})
	s.add(second)
	get := func(query string) (int, wireMap) {
		t.Helper()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/map"+query, nil))
		var m wireMap
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, m
	}
	check := func(query string, code int, since int64, places int) {
		t.Helper()
		c, m := get(query)
		if c != code || m.Since != since || len(m.Placements) != places {
			t.Errorf("%s: %d, since %d, %d placements; want %d, %d, %d", query, c, m.Since, len(m.Placements), code, since, places)
		}
	}
	check("", 200, 0, 8)
	check("?since=1", 200, 1, 1)  // held: the delta
	check("?since=2", 304, 0, 0)  // nothing newer
	check("?since=77", 304, 0, 0) // a client ahead of the relay: nothing newer here
	check("?since=2&wait=10ms", 304, 0, 0)
	cur := second
	for v := int64(3); v < 3+history; v++ {
		cur, _ = cur.Next(v, cur.Servers(), nil)
		s.add(cur)
	}
	check("?since=1", 200, 0, 8) // no longer held: the whole map
	for v := range cur.Version + 500 {
		get(fmt.Sprintf("?since=%d", v))
	}
	if n := len(s.encoded); n > history+1 {
		t.Fatalf("%d replies cached for one version, holding %d", n, history)
	}
}

// TestOversizedReplyRefusedCheaply: a reply of maxReply bytes of empty
// placements is refused before it is decoded into them; decoding it
// allocates about its own size (the undecoded list), not the tens of
// times that a placement per two bytes would cost.
func TestOversizedReplyRefusedCheaply(t *testing.T) {
	const head = `{"version":1,"shards":8192,"layout":{"epoch_ms":1314220021721,"time_bits":41,"shard_bits":13,"seq_bits":10,"slot_bits":6},"servers":[],"placements":[`
	body := make([]byte, 0, maxReply)
	body = append(body, head...)
	for len(body) < maxReply-16 {
		body = append(body, "{},"...)
	}
	body = append(body, "{}]}"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := decodeMap(body, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadReply) {
		t.Fatalf("a reply of %d placements for 8192 shards: %v", len(body)/3, err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("decoding a %d MiB reply allocated %d MiB", len(body)>>20, allocated>>20)
	if allocated > 3*uint64(len(body)) {
		t.Fatalf("decoding a %d MiB reply allocated %d MiB", len(body)>>20, allocated>>20)
	}
}
