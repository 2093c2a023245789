package scale

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	AppMain() // the app processes are this test binary
	os.Exit(m.Run())
}

// TestScaleShort is make scale at a size make test affords: two dozen app
// processes of three routers each, a shard move in the middle of their
// load, the routers polling the catalog; then a dozen processes whose
// routers wait on two relays; then two dozen processes on direct
// connections let go at once (make scale-direct). It fails on any
// duplicate or misplaced ID, request error, server taken as down, or
// router left on an old map; the table it logs (-v) has the figures.
func TestScaleShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two dozen OS processes; the first stage of make test runs it")
	}
	for _, tt := range []struct {
		name             string
		procs, relays    int
		direct, together bool
	}{
		{"polling", 24, 0, false, false},
		{"relays", 12, 2, false, false},
		{"direct", 24, 0, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := Run(ctx, Options{Procs: tt.procs, Routers: 3, Shards: 64, Load: 3 * time.Second, Every: 200 * time.Millisecond,
				Poll: 100 * time.Millisecond, FirstRead: true, Relays: tt.relays, Direct: tt.direct, Together: tt.together}, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + res.Table())
			if err := res.OK(); err != nil {
				t.Fatal(err)
			}
			// A move bumps the map version at least three times (moving,
			// fenced, the flip): without them the run proves nothing
			// about propagation.
			if res.Flips < 3 || len(res.Propagation) == 0 {
				t.Fatalf("%d map versions announced during the load, %d arrivals timed: the move did not happen", res.Flips, len(res.Propagation))
			}
			if res.Routers != tt.procs*3 || res.IDs == 0 || res.Writes != res.IDs {
				t.Fatalf("%d routers, %d IDs for %d writes", res.Routers, res.IDs, res.Writes)
			}
			if tt.relays > 0 && res.CatalogBackends > 2*tt.procs {
				t.Fatalf("%d catalog backends with relays: the routers' own catalog pools are open", res.CatalogBackends)
			}
		})
	}
}
