package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testcert"
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

// startRelay runs `shardctl relay args...` until the test ends and
// returns the address it says it serves on, and a function that returns
// all it has written.
func startRelay(t *testing.T, args ...string) (string, func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testkit.SyncBuffer
	exited := make(chan int, 1)
	go func() { exited <- runIO(ctx, append([]string{"relay"}, args...), &out, &errOut) }()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("relay exited %d: %s", code, errOut.String())
		}
	})
	var addr string
	testkit.Until(t, 30*time.Second, func() error {
		line := out.String()
		if _, after, ok := strings.Cut(line, " on "); ok {
			addr = strings.TrimSpace(after)
			return nil
		}
		return fmt.Errorf("relay: %q %q", line, errOut.String())
	})
	return addr, func() string { return out.String() + errOut.String() }
}

// TestRelayCommandTCP: `shardctl relay --listen` refuses to start without
// a credential (exit 2, saying what to add), and with a token file or
// client certificates serves the catalog's map to a client that has
// them, and to no other. The token appears in none of its output.
func TestRelayCommandTCP(t *testing.T) {
	dsn := pgtest.NewDatabase(t, 0)
	if code, _, errOut := shardctl("init", "--catalog", dsn, "--server", "a="+pgtest.NewDatabase(t, 0), "--shards", "8", "--quiet"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0"},
		{"--listen", "127.0.0.1:0", "--tls-cert", "x.crt"},
		{"--socket", filepath.Join(dir, "s.sock"), "--token-file", "t"},
	} {
		code, _, errOut := shardctl(append([]string{"relay", "--catalog", dsn}, args...)...)
		if code != 2 || !strings.Contains(errOut, "--t") {
			t.Fatalf("relay %v: exit %d: %s", args, code, errOut)
		}
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	want, err := cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	load := func(addr string, o relay.Options) error {
		o.Catalog = cat
		c, err := relay.DialWith(addr, o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := c.Load(ctx)
		if err == nil && (got.Version != want.Version || !reflect.DeepEqual(got.Placements(), want.Placements())) {
			t.Fatalf("relay serves v%d, catalog v%d", got.Version, want.Version)
		}
		return err
	}

	t.Run("token", func(t *testing.T) {
		tokenFile := filepath.Join(dir, "token")
		if err := os.WriteFile(tokenFile, []byte("a-long-s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr, output := startRelay(t, "--catalog", dsn, "--listen", "127.0.0.1:0", "--token-file", tokenFile)
		defer func() {
			if strings.Contains(output(), "s3cret") {
				t.Errorf("the relay wrote its token: %s", output())
			}
		}()
		if err := load(addr, relay.Options{}); !errors.Is(err, relay.ErrUnauthorized) {
			t.Fatalf("without the token: %v", err)
		}
		if err := load(addr, relay.Options{Token: "a-long-s3cret"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("client certificates", func(t *testing.T) {
		ca := testcert.New(t, dir, "relay")
		server := ca.Server(t)
		addr, _ := startRelay(t, "--catalog", dsn, "--listen", "127.0.0.1:0", "--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-client-ca", ca.File)
		if err := load(addr, relay.Options{TLS: &tls.Config{RootCAs: ca.Pool}}); err == nil {
			t.Fatal("a client without a certificate was served")
		}
		if err := load(addr, relay.Options{TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Client(t, "app").TLS}}}); err != nil {
			t.Fatal(err)
		}
	})
}
