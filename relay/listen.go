package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// ErrInUse reports a socket path where a relay already answers. Use that
// relay, stop it first, or give this one another --socket.
var ErrInUse = errors.New("a relay already answers on this socket; stop it first or choose another path")

// MaxConns bounds the connections a relay serves at once; a client past
// it waits for one to close. Each router holds one or two.
const MaxConns = 1024

// Listen opens the relay's Unix socket at path, readable and writable by
// its owner only (the map holds the servers' DSNs), and accepts only peers
// whose uid (SO_PEERCRED, read from the kernel) is the relay's own or one
// of allow: a socket whose mode was widened, or a directory another user
// can reach, still serves no one else. A socket left by a relay that is
// gone is replaced; one that answers is not.
func Listen(path string, allow ...int) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return nil, fmt.Errorf("relay: %s: %w", path, ErrInUse)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("relay: %s exists and is not a socket; choose another path", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("relay: remove the stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("relay: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("relay: %s: %w", path, err)
	}
	return &peerListener{Listener: l, allow: append([]int{os.Getuid()}, allow...)}, nil
}

// peerListener accepts the Unix connections of allowed uids only, and
// closes the others at once.
type peerListener struct {
	net.Listener
	allow []int
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		uid, err := peerUID(uc)
		if err == nil && slices.Contains(l.allow, uid) {
			return c, nil
		}
		_ = c.Close()
	}
}

// limitListener lets at most n connections be open at once: Accept
// waits for one to close.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func limit(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
