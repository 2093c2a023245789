package router

import (
	"errors"
	"testing"
)

func TestNewSnapshot(t *testing.T) {
	servers := []Server{{Name: "alpha"}, {Name: "beta"}}
	place := func(shard int, server string) Placement {
		return Placement{Shard: shard, Server: server, State: StateActive}
	}
	good := []Placement{place(0, "alpha"), place(1, "beta"), place(2, "alpha")}
	with := func(f func([]Placement) []Placement) []Placement {
		return f(append([]Placement(nil), good...))
	}
	tests := []struct {
		name       string
		shards     int
		servers    []Server
		placements []Placement
		wantErr    error
	}{
		{"valid", 3, servers, good, nil},
		{"explicit schema", 3, servers, with(func(p []Placement) []Placement { p[1].Schema = "shard_0001"; return p }), nil},
		{"moving and fenced", 3, servers, with(func(p []Placement) []Placement {
			p[0].State, p[1].State = StateMoving, StateFenced
			return p
		}), nil},
		{"zero shards", 0, servers, nil, ErrInvalidShardCount},
		{"negative shards", -1, servers, nil, ErrInvalidShardCount},
		{"missing shard", 3, servers, good[:2], ErrBadCatalog},
		{"shard placed twice", 3, servers, append(with(func(p []Placement) []Placement { return p }), place(1, "alpha")), ErrBadCatalog},
		{"shard beyond count", 3, servers, append(with(func(p []Placement) []Placement { return p }), place(3, "alpha")), ErrBadCatalog},
		{"negative shard", 3, servers, append(with(func(p []Placement) []Placement { return p }), place(-1, "alpha")), ErrBadCatalog},
		{"unknown server", 3, servers, with(func(p []Placement) []Placement { p[2].Server = "gamma"; return p }), ErrBadCatalog},
		{"unknown state", 3, servers, with(func(p []Placement) []Placement { p[2].State = "gone"; return p }), ErrBadCatalog},
		{"wrong schema", 3, servers, with(func(p []Placement) []Placement { p[2].Schema = "shard_0003"; return p }), ErrBadCatalog},
		{"bad schema", 3, servers, with(func(p []Placement) []Placement { p[2].Schema = "public"; return p }), ErrBadCatalog},
		{"empty server name", 3, append(servers, Server{}), good, ErrBadCatalog},
		{"duplicate server", 3, append(servers, Server{Name: "beta"}), good, ErrBadCatalog},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSnapshot(7, tt.shards, tt.servers, tt.placements)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("NewSnapshot error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != 7 || s.Shards != 3 || len(s.Placements()) != 3 {
				t.Fatalf("snapshot %+v", s)
			}
			p, err := s.Placement(2)
			if err != nil || p.Server != "alpha" || p.Schema != "shard_0002" {
				t.Fatalf("Placement(2) = %+v, %v", p, err)
			}
		})
	}
}

func TestSnapshotLookups(t *testing.T) {
	s, err := NewSnapshot(1, 4, []Server{{Name: "beta"}, {Name: "alpha"}},
		[]Placement{{Shard: 0, Server: "alpha", State: StateActive}, {Shard: 1, Server: "beta", State: StateActive},
			{Shard: 2, Server: "alpha", State: StateActive}, {Shard: 3, Server: "alpha", State: StateMoving}})
	if err != nil {
		t.Fatal(err)
	}
	for _, shard := range []int{-1, 4} {
		if _, err := s.Placement(shard); !errors.Is(err, ErrShardOutOfRange) {
			t.Errorf("Placement(%d) = %v, want ErrShardOutOfRange", shard, err)
		}
	}
	if got := s.ShardsOn("alpha"); len(got) != 3 || got[0] != 0 || got[2] != 3 {
		t.Errorf("ShardsOn(alpha) = %v", got)
	}
	if got := s.ShardsOn("nobody"); len(got) != 0 {
		t.Errorf("ShardsOn(nobody) = %v", got)
	}
	if srv := s.Servers(); len(srv) != 2 || srv[0].Name != "alpha" {
		t.Errorf("Servers() = %v, want sorted", srv)
	}
	if _, ok := s.Server("gamma"); ok {
		t.Error("Server(gamma) found")
	}
	// Placements is a copy.
	ps := s.Placements()
	ps[0].Server = "beta"
	if p, _ := s.Placement(0); p.Server != "alpha" {
		t.Error("Placements exposed the snapshot's slice")
	}
}
