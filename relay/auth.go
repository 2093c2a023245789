package relay

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// Errors of a relay's credentials. Test with errors.Is.
var (
	// ErrNoCredential reports a relay on TCP given no way to authenticate
	// its clients: anyone who reaches the port would read the servers'
	// DSNs.
	ErrNoCredential = errors.New("a relay on TCP needs a credential: a token (--token-file FILE) and/or client certificates (--tls-cert, --tls-key and --tls-client-ca)")
	// ErrCleartext reports a token that would cross the network in clear,
	// and the map (DSNs with their passwords) with it.
	ErrCleartext = errors.New("a token and the map would cross the network in clear: add TLS (--tls-cert and --tls-key), or listen on a loopback address")
	// ErrUnauthorized reports a relay that refused the client's credential:
	// give the client the relay's token (Options.Token) or a certificate
	// its client CA signed (Options.TLS).
	ErrUnauthorized = errors.New("the relay refused the credential: give the client the relay's token or a client certificate it accepts")
	// ErrTokenFile reports a token file that is empty or that users other
	// than its owner may read.
	ErrTokenFile = errors.New("bad token file: it must hold the token (one line) and be readable by its owner only (chmod 600)")
)

// TCPAuth is how a relay on TCP authenticates its clients. At least one of
// Token and TLS.ClientCAs is required; both may be.
type TCPAuth struct {
	// Token, when not empty, is what every request must carry
	// (Authorization: Bearer TOKEN), compared in constant time. A token
	// without TLS is accepted only on a loopback address.
	Token []byte
	// TLS, when not nil, is the relay's certificate (Certificates); its
	// ClientCAs, when set, are the CAs whose client certificates the
	// relay accepts, and a client without one is refused in the
	// handshake.
	TLS *tls.Config
}

// ListenTCP opens a relay's TCP listener at addr (host:port), which
// authenticates its clients as a says. No credential is ErrNoCredential;
// a token without TLS on an address that is not loopback is
// ErrCleartext.
func ListenTCP(addr string, a TCPAuth) (net.Listener, error) {
	mutual := a.TLS != nil && a.TLS.ClientCAs != nil
	if len(a.Token) == 0 && !mutual {
		return nil, fmt.Errorf("relay: listen on %s: %w", addr, ErrNoCredential)
	}
	if a.TLS != nil && len(a.TLS.Certificates) == 0 && a.TLS.GetCertificate == nil {
		return nil, fmt.Errorf("relay: listen on %s: TLS without the relay's certificate: give --tls-cert and --tls-key", addr)
	}
	if a.TLS == nil && !loopback(addr) {
		return nil, fmt.Errorf("relay: listen on %s: %w", addr, ErrCleartext)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("relay: listen on %s: %w", addr, err)
	}
	tl := &tcpListener{Listener: l}
	if len(a.Token) > 0 {
		sum := sha256.Sum256(a.Token)
		tl.token = sum[:]
	}
	if a.TLS != nil {
		cfg := a.TLS.Clone()
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
		if mutual {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		tl.Listener = tls.NewListener(l, cfg)
	}
	return tl, nil
}

// loopback reports whether addr's host is a loopback address (or
// localhost, which resolves to one).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tcpListener is a TCP listener that ListenTCP made: TLS when asked for,
// and the token's digest that Serve checks every request against.
type tcpListener struct {
	net.Listener
	token []byte // sha256 of the token; nil: none
}

// auth wraps h with the token check, when the listener has a token.
func (l *tcpListener) auth(h http.Handler) http.Handler {
	if l.token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		// Digests of equal length: the comparison takes the same time
		// whatever the token sent.
		if !ok || subtle.ConstantTimeCompare(sum[:], l.token) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shardkit relay"`)
			http.Error(w, "relay: unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// ReadTokenFile reads a relay's token from path: the file's content
// without surrounding white space. A file that is empty, or that its
// group or others may read, is ErrTokenFile.
func ReadTokenFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("relay: token file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("relay: token file %s (mode %v): %w", path, fi.Mode().Perm(), ErrTokenFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("relay: token file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.ContainsAny(b, "\r\n") {
		return nil, fmt.Errorf("relay: token file %s: %w", path, ErrTokenFile)
	}
	return b, nil
}
