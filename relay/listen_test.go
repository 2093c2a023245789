package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/router"
)

// peerChildEnv makes the test binary a relay client of the socket it
// names, which asks for the version and says what it got (TestMain).
const peerChildEnv = "SHARDKIT_RELAY_PEER_CHILD"

func peerChild(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := Dial(path)
	defer c.Close()
	v, err := c.MapVersion(ctx)
	if err != nil {
		fmt.Println("refused:", err)
		return 3
	}
	fmt.Println("version", v)
	return 0
}

// TestUnixPeerOfAnotherUIDRefused: with the socket's mode and directory
// opened to everyone, a client running as another user (nobody) is
// refused by its peer credentials, and one as the relay's own user, or a
// uid the relay allows, is served.
func TestUnixPeerOfAnotherUIDRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another user needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir, err := os.MkdirTemp("", "relay-peer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The test binary, where nobody can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "relay.test")
	copyFile(t, self, bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := router.NewFixed(testSnapshot(t, 3, 8))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, allow ...int) string {
		path := filepath.Join(dir, fmt.Sprintf("relay-%d.sock", len(allow)))
		l, err := Listen(path, allow...)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o666); err != nil { // as an operator widening it by mistake
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- NewServer(r, testCatalogID).Serve(ctx, l) }()
		t.Cleanup(func() { cancel(); <-done })
		return path
	}
	client := func(path string, cred *syscall.Credential) (string, error) {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), peerChildEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	asNobody := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}

	own := serve(t)
	if out, err := client(own, nil); err != nil || out != "version 3" {
		t.Fatalf("a client of the relay's own uid: %q, %v", out, err)
	}
	out, err := client(own, asNobody)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out, "refused") {
		t.Fatalf("a client as nobody (uid %d): %q, %v; want it refused", uid, out, err)
	}
	allowed := serve(t, uid)
	if out, err := client(allowed, asNobody); err != nil || out != "version 3" {
		t.Fatalf("a client as nobody, which the relay allows: %q, %v", out, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRelayOfAnotherUIDRefused: a client that names the uids its relay
// runs as refuses a socket served by another (as a process that took the
// socket's path first would be), and is served by one of them.
func TestRelayOfAnotherUIDRefused(t *testing.T) {
	path, _ := serveFixed(t, testSnapshot(t, 3, 8), testCatalogID)
	ctx := context.Background()
	for _, tt := range []struct {
		uids []int
		want error
	}{
		{[]int{os.Getuid() + 1}, ErrRelayPeer},
		{[]int{os.Getuid() + 1, os.Getuid()}, nil},
		{nil, nil},
	} {
		c, err := DialWith(path, Options{RelayUIDs: tt.uids})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Load(ctx)
		c.Close()
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Fatalf("relay uids %v: %v, want %v", tt.uids, err, tt.want)
		}
	}
	if _, err := DialWith("127.0.0.1:1", Options{RelayUIDs: []int{0}}); err == nil {
		t.Fatal("RelayUIDs for a TCP relay: no error")
	}
}
