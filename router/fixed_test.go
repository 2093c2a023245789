package router

import (
	"context"
	"errors"
	"testing"
)

func fixedSnap(t *testing.T, version int64, shard1On string) *Snapshot {
	t.Helper()
	servers := []Server{{Name: "a", State: "active"}, {Name: "b", State: "active"}}
	s, err := NewSnapshot(version, 2, servers, []Placement{
		{Shard: 0, Server: "a", Schema: SchemaName(0), State: StateActive},
		{Shard: 1, Server: shard1On, Schema: SchemaName(1), State: StateActive},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFixedRouter: a router over a map made by hand installs newer
// versions only, tells its subscribers, reloads to the map in force and
// watches nothing.
func TestFixedRouter(t *testing.T) {
	if _, err := NewFixed(nil); !errors.Is(err, ErrBadCatalog) {
		t.Fatalf("NewFixed(nil) = %v, want ErrBadCatalog", err)
	}
	r, err := NewFixed(fixedSnap(t, 1, "b"))
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := r.Subscribe()
	defer stop()
	if got := r.Set(fixedSnap(t, 2, "a")); got.Version != 2 {
		t.Fatalf("Set of version 2 left version %d in force", got.Version)
	}
	if s := <-ch; s.Version != 2 {
		t.Fatalf("subscriber got version %d, want 2", s.Version)
	}
	if got := r.Set(fixedSnap(t, 1, "b")); got.Version != 2 {
		t.Fatalf("Set of an older version replaced the map: version %d in force", got.Version)
	}
	if p, _ := r.Snapshot().Placement(1); p.Server != "a" {
		t.Fatalf("shard 1 on %s, want a", p.Server)
	}
	s, err := r.Reload(context.Background())
	if err != nil || s.Version != 2 {
		t.Fatalf("Reload = %v, %v; want version 2", s, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Watch(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v, want the context's error", err)
	}
	if r.Source() != nil {
		t.Fatal("a router over a hand-made map has a catalog")
	}
}
