package main

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

// TestRelayCommand runs `shardctl relay` on a catalog, reads the map
// through its socket (the catalog's own, after a change too), stops it
// with its context, and checks the usage errors.
func TestRelayCommand(t *testing.T) {
	dsn := pgtest.NewDatabase(t, 0)
	if code, _, errOut := shardctl("init", "--catalog", dsn, "--server", "a="+pgtest.NewDatabase(t, 0), "--shards", "8", "--quiet"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	if code, _, errOut := shardctl("relay", "--catalog", dsn); code != 2 || !strings.Contains(errOut, "--socket") {
		t.Fatalf("relay without --socket: exit %d: %s", code, errOut)
	}
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testkit.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runIO(ctx, []string{"relay", "--catalog", dsn, "--socket", sock, "--poll", "100ms"}, &out, &errOut)
	}()
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "serving shard map version") })

	cat, err := catalog.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	c := relay.Dial(sock)
	defer c.Close()
	if _, err := cat.PlaceShard(context.Background(), 3, "a", router.StateFenced); err != nil {
		t.Fatal(err)
	}
	want, err := cat.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, 30*time.Second, func() error {
		got, err := c.Load(context.Background())
		if err == nil && (got.Version != want.Version || !reflect.DeepEqual(got.Placements(), want.Placements())) {
			err = fmt.Errorf("relay serves v%d, catalog v%d", got.Version, want.Version)
		}
		return err
	})
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("relay exited %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop with its context")
	}
}
