package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/testcert"
	"github.com/shardkit/shardkit/router"
)

// serveTCP serves a fixed map on a TCP relay authenticated as a says,
// until the test ends, and returns its address.
func serveTCP(t *testing.T, a TCPAuth) string {
	t.Helper()
	l, err := ListenTCP("127.0.0.1:0", a)
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.NewFixed(testSnapshot(t, 3, 8))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(r, testCatalogID).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return l.Addr().String()
}

// load reads the map from addr as o says.
func load(t *testing.T, addr string, o Options) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := DialWith(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Load(ctx)
	if err == nil && s.Version != 3 {
		t.Fatalf("loaded v%d, want 3", s.Version)
	}
	return err
}

// TestTCPRequiresCredential: a relay on TCP does not start without a
// credential, nor with a token in clear off loopback, nor on a TCP
// listener of its own; and it refuses a client without the credential
// (no token, a wrong one, no client certificate, one of another CA),
// serving only one with it. A client that does not trust the relay's
// certificate refuses the relay.
func TestTCPRequiresCredential(t *testing.T) {
	if _, err := ListenTCP("127.0.0.1:0", TCPAuth{}); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("no credential: %v, want ErrNoCredential", err)
	}
	if _, err := ListenTCP("0.0.0.0:0", TCPAuth{Token: []byte("s3cret")}); !errors.Is(err, ErrCleartext) {
		t.Fatalf("a token in clear on all interfaces: %v, want ErrCleartext", err)
	}
	dir := t.TempDir()
	ca, other := testcert.New(t, dir, "relay"), testcert.New(t, dir, "other")
	server := ca.Server(t)
	if _, err := ListenTCP("127.0.0.1:0", TCPAuth{TLS: &tls.Config{Certificates: []tls.Certificate{server.TLS}}}); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("TLS without client CAs nor token: %v, want ErrNoCredential", err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := router.NewFixed(testSnapshot(t, 3, 8))
	if err := NewServer(r, testCatalogID).Serve(context.Background(), raw); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("Serve on a bare TCP listener: %v, want ErrNoCredential", err)
	}

	t.Run("token", func(t *testing.T) {
		addr := serveTCP(t, TCPAuth{Token: []byte("s3cret")})
		for _, tok := range []string{"", "s3cre", "s3cret2"} {
			if err := load(t, addr, Options{Token: tok}); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("token %q: %v, want ErrUnauthorized", tok, err)
			}
		}
		if err := load(t, addr, Options{Token: "s3cret"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("client certificate", func(t *testing.T) {
		addr := serveTCP(t, TCPAuth{TLS: &tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool}})
		good := ca.Client(t, "app")
		for name, o := range map[string]Options{
			"no certificate":              {TLS: &tls.Config{RootCAs: ca.Pool}},
			"a certificate of another CA": {TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{other.Client(t, "app").TLS}}},
			"plain HTTP":                  {},
			"a relay it does not trust":   {TLS: &tls.Config{RootCAs: other.Pool, Certificates: []tls.Certificate{good.TLS}}},
		} {
			if err := load(t, addr, o); err == nil {
				t.Fatalf("%s: served", name)
			}
		}
		if err := load(t, addr, Options{TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{good.TLS}}}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("both", func(t *testing.T) {
		addr := serveTCP(t, TCPAuth{Token: []byte("s3cret"), TLS: &tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool}})
		tc := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Client(t, "app").TLS}}
		if err := load(t, addr, Options{TLS: tc}); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("a certificate without the token: %v, want ErrUnauthorized", err)
		}
		if err := load(t, addr, Options{TLS: tc, Token: "s3cret"}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadTokenFile: a token file readable by others, or empty, is
// refused; the token is the file without its surrounding white space.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if b, err := ReadTokenFile(write("ok", "s3cret\n", 0o600)); err != nil || string(b) != "s3cret" {
		t.Fatalf("token %q, %v", b, err)
	}
	for name, p := range map[string]string{
		"readable by others": write("open", "s3cret\n", 0o644),
		"empty":              write("empty", " \n", 0o600),
		"two lines":          write("two", "a\nb\n", 0o600),
	} {
		if _, err := ReadTokenFile(p); !errors.Is(err, ErrTokenFile) {
			t.Fatalf("%s: %v, want ErrTokenFile", name, err)
		}
	}
}
