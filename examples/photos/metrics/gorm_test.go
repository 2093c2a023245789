package metrics

import (
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

func TestServerOf(t *testing.T) {
	servers := []router.Server{{Name: "a"}, {Name: "b"}}
	var pl []router.Placement
	for s := 0; s < 4; s++ {
		pl = append(pl, router.Placement{Shard: s, Server: servers[s/2].Name, State: router.StateActive})
	}
	snap, err := router.NewSnapshot(1, 4, servers, pl)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, table string
		fanout      bool
		want        string
	}{
		{"routed to shard 1", "shard_0001.photos", false, "a"},
		{"routed to shard 3", "shard_0003.likes", false, "b"},
		{"shard outside the map", "shard_0009.photos", false, "default"},
		{"not a shard schema", "public.photos", false, "default"},
		{"unqualified, spread over shards", "photos", true, "multi"},
		{"unqualified, unrouted", "photos", false, "default"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stmt := &gorm.Statement{Table: c.table, Clauses: map[string]clause.Clause{}}
			if c.fanout {
				stmt.Clauses["shardkit:fanout"] = clause.Clause{}
			}
			if got := serverOf(stmt, snap); got != c.want {
				t.Fatalf("serverOf(%q) = %q, want %q", c.table, got, c.want)
			}
		})
	}
}
