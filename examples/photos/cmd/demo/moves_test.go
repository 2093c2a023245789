package main

import (
	"strconv"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

func TestPickShards(t *testing.T) {
	servers := []router.Server{{Name: "pg1"}, {Name: "pg2"}, {Name: "pg3"}}
	var pl []router.Placement
	for s := 0; s < 30; s++ {
		pl = append(pl, router.Placement{Shard: s, Server: servers[s/10].Name, State: router.StateActive})
	}
	snap, err := router.NewSnapshot(1, 30, servers, pl)
	if err != nil {
		t.Fatal(err)
	}
	snap.Layout = idgen.DefaultLayout()
	user := func(shard int) string {
		id, err := snap.Layout.Compose(snap.Layout.EpochMs+1000, shard, 1)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(id, 10)
	}
	// Users on shards 1, 1, 2 (pg1), 12 (pg2), 25, 26 (pg3).
	users := []string{user(1), user(1), user(2), user(12), user(25), user(26), "not-an-id"}
	cases := []struct {
		name   string
		target string
		n      int
		want   []int
	}{
		{"round robin over the other servers", "pg4", 4, []int{1, 12, 25, 2}},
		{"never the target's own shards", "pg3", 5, []int{1, 12, 2}},
		{"no more than asked", "pg4", 1, []int{1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pickShards(snap, users, c.target, c.n)
			if len(got) != len(c.want) {
				t.Fatalf("picked %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("picked %v, want %v", got, c.want)
				}
			}
		})
	}
}
