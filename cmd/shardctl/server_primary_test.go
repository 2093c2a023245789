package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestServerPromoted records a server's primary with `server promoted`:
// the first run records it (system identifier and timeline) in a new map
// version, a second changes nothing, and an unknown server is refused.
func TestServerPromoted(t *testing.T) {
	cat := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	if code, _, errOut := shardctl("init", "--catalog", cat, "--server", "a="+a, "--server", "b="+b, "--shards", "4", "--quiet"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, cat)
	primary := func() (router.Primary, int64) {
		t.Helper()
		c, err := catalog.Open(context.Background(), cat)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		snap, err := c.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s, _ := snap.Server("a")
		return s.Primary, snap.Version
	}
	before, v0 := primary()
	if before.Recorded() {
		t.Fatalf("a primary recorded before promoted ran: %v", before)
	}
	code, out, errOut := shardctl("server", "promoted", "a")
	if code != 0 || !strings.Contains(out, "primary recorded") {
		t.Fatalf("server promoted a: exit %d: %s%s", code, out, errOut)
	}
	got, v1 := primary()
	if !got.Recorded() || got.Timeline != 1 || v1 <= v0 {
		t.Fatalf("after promoted: primary %v at map version %d (was %d)", got, v1, v0)
	}
	if code, out, errOut := shardctl("server", "promoted", "a"); code != 0 || !strings.Contains(out, "already recorded") {
		t.Fatalf("server promoted a again: exit %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := shardctl("server", "promoted", "nope"); code == 0 || !strings.Contains(errOut, "nope") {
		t.Fatalf("server promoted nope: exit %d: %s", code, errOut)
	}
}
