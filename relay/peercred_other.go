//go:build !linux

package relay

import (
	"errors"
	"net"
)

// peerUID is known on Linux only; elsewhere every Unix peer is refused.
func peerUID(*net.UnixConn) (int, error) {
	return -1, errors.New("relay: peer credentials are read on Linux only")
}
