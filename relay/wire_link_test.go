package relay

import (
	"encoding/json"
	"testing"

	"github.com/shardkit/shardkit/router"
)

// TestWireServerLink: a relay carries the catalog's record of how each
// server is reached: a server reached directly with an app-role login
// (its admin DSN apart) stays direct with its admin DSN hidden, one
// recorded pooled with one DSN stays pooled, and one with no record keeps
// the inference from its DSNs.
func TestWireServerLink(t *testing.T) {
	in := []router.Server{
		{Name: "role", DSN: "postgres://app@role/db", AdminDSN: "postgres://operator@role/db", Link: router.LinkDirect},
		{Name: "pooled", DSN: "postgres://pgb:6432/db", Link: router.LinkPooled},
		{Name: "old", DSN: "postgres://pgb:6432/old", AdminDSN: "postgres://old/db"},
		{Name: "one", DSN: "postgres://one/db"},
	}
	b, err := json.Marshal(toWireServers(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeServers(&wireMapLists{Servers: b})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range in {
		g := out[i]
		hidden := s.AdminDSN != ""
		if g.Link != s.Link || g.Direct() != s.Direct() || g.AdminHidden != hidden || g.AdminDSN != "" {
			t.Errorf("server %s: got %+v (direct %v), want link %v, direct %v, admin DSN hidden %v", s.Name, g, g.Direct(), s.Link, s.Direct(), hidden)
		}
	}
}
