package router

import (
	"errors"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
)

func TestWatchOptionsPoll(t *testing.T) {
	tests := []struct {
		name string
		o    WatchOptions
		want time.Duration
	}{
		{"zero value polls", WatchOptions{}, DefaultPoll},
		{"poll given", WatchOptions{Poll: 50 * time.Millisecond}, 50 * time.Millisecond},
		{"negative without listen polls", WatchOptions{Poll: -1}, DefaultPoll},
		{"listen alone", WatchOptions{Listen: true}, 0},
		{"listen, no poll", WatchOptions{Listen: true, Poll: -1}, 0},
		{"listen and poll", WatchOptions{Listen: true, Poll: 5 * time.Second}, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.poll(); got != tt.want {
				t.Fatalf("%+v.poll() = %v, want %v", tt.o, got, tt.want)
			}
		})
	}
}

func TestSnapshotNext(t *testing.T) {
	ab := []Server{{Name: "a"}, {Name: "b"}}
	base, err := NewSnapshot(3, 4, ab, []Placement{
		{Shard: 0, Server: "a", State: StateActive}, {Shard: 1, Server: "a", State: StateActive},
		{Shard: 2, Server: "b", State: StateActive}, {Shard: 3, Server: "b", State: StateActive},
	})
	if err != nil {
		t.Fatal(err)
	}
	base.Layout = idgen.DefaultLayout()
	tests := []struct {
		name    string
		servers []Server
		changed []Placement
		want    []string // server of each shard
		wantErr error
	}{
		{"no rows changed", ab, nil, []string{"a", "a", "b", "b"}, nil},
		{"one row moves", ab, []Placement{{Shard: 1, Server: "b", State: StateActive}}, []string{"a", "b", "b", "b"}, nil},
		{"a new server takes a shard", append(ab, Server{Name: "c"}), []Placement{{Shard: 0, Server: "c", State: StateMoving}}, []string{"c", "a", "b", "b"}, nil},
		{"a server leaves with its shards moved", []Server{{Name: "a"}}, []Placement{{Shard: 2, Server: "a", State: StateActive}, {Shard: 3, Server: "a", State: StateActive}}, []string{"a", "a", "a", "a"}, nil},
		{"a server with shards leaves", []Server{{Name: "a"}}, nil, nil, ErrBadCatalog},
		{"a row on an unknown server", ab, []Placement{{Shard: 1, Server: "z", State: StateActive}}, nil, ErrBadCatalog},
		{"a row out of range", ab, []Placement{{Shard: 4, Server: "a", State: StateActive}}, nil, ErrBadCatalog},
		{"a row with a bad state", ab, []Placement{{Shard: 1, Server: "a", State: "gone"}}, nil, ErrBadCatalog},
		{"a row with another shard's schema", ab, []Placement{{Shard: 1, Server: "a", Schema: SchemaName(2), State: StateActive}}, nil, ErrBadCatalog},
		{"a server twice", []Server{{Name: "a"}, {Name: "a"}, {Name: "b"}}, nil, nil, ErrBadCatalog},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := base.Next(4, tt.servers, tt.changed)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Next = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Version != 4 || n.Shards != 4 || n.Layout != base.Layout || len(n.Servers()) != len(tt.servers) {
				t.Fatalf("Next: version %d, shards %d, layout %+v, %d servers", n.Version, n.Shards, n.Layout, len(n.Servers()))
			}
			for shard, want := range tt.want {
				if p, _ := n.Placement(shard); p.Server != want || p.Schema != SchemaName(shard) {
					t.Fatalf("shard %d: %+v, want on %s", shard, p, want)
				}
			}
			if p, _ := base.Placement(1); p.Server != "a" {
				t.Fatal("Next changed the snapshot it started from")
			}
		})
	}
}
