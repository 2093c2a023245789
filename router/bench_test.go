package router

import (
	"testing"
)

func BenchmarkShardOfKey(b *testing.B) {
	b.ReportAllocs()
	var key int64
	for b.Loop() {
		if _, err := ShardOfKey(key, 2000); err != nil {
			b.Fatal(err)
		}
		key += 7919
	}
}

func BenchmarkShardOfString(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ShardOfString("user@example.com", 2000); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSnapshotPlacement(b *testing.B) {
	testServers := []string{"alpha", "beta"}
	const shards = 2000
	ps := make([]Placement, shards)
	for i := range ps {
		ps[i] = Placement{Shard: i, Server: testServers[i%2], State: StateActive}
	}
	s, err := NewSnapshot(1, shards, []Server{{Name: testServers[0]}, {Name: testServers[1]}}, ps)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := s.Placement(i % shards); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkSnapshotNext is what a polling router spends on a map change
// besides the round trips: one changed row applied to a 2000-shard map.
func BenchmarkSnapshotNext(b *testing.B) {
	servers := []Server{{Name: "alpha"}, {Name: "beta"}}
	const shards = 2000
	ps := make([]Placement, shards)
	for i := range ps {
		ps[i] = Placement{Shard: i, Server: servers[i%2].Name, State: StateActive}
	}
	s, err := NewSnapshot(1, shards, servers, ps)
	if err != nil {
		b.Fatal(err)
	}
	changed := []Placement{{Shard: 7, Server: "alpha", State: StateActive}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Next(2, servers, changed); err != nil {
			b.Fatal(err)
		}
	}
}
