package relay

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// ErrUnavailable reports a relay that does not answer: not started, or at
// another path. Start shardctl relay --socket PATH on the host, or point the
// router at the path the relay listens on.
var ErrUnavailable = errors.New("relay not reachable: start it (shardctl relay --socket PATH) or give the router the catalog instead")

// longPoll is how long a listening router's request waits for a new
// version before asking again: short enough that a relay restarted in
// between is found again soon, long enough to cost nothing.
const longPoll = 30 * time.Second

// maxReply bounds a reply's size: a whole map of 8192 shards is about
// 550 KB.
const maxReply = 64 << 20

// Client reads the shard map from a relay. It is a router.VersionSource:
// give it to router.New and keep the router current with
// router.Router.WatchWith(ctx, router.WatchOptions{Listen: true}), which
// waits on the relay for each new version and reads only what changed.
// It is safe for concurrent use.
type Client struct {
	addr   string
	url    string // the URL every path is asked at
	hc     *http.Client
	token  string
	verify Verifier

	mu      sync.Mutex
	newest  *router.Snapshot // the newest map this client has read: where deltas start
	arrived *router.Snapshot // what a listener's wait brought, for the reload that follows it
	ids     identities
}

var _ router.VersionSource = (*Client)(nil)

// Options are how a client authenticates itself to a relay and checks
// the maps it serves. The zero value checks only that every map is of
// the catalog of the first one read.
type Options struct {
	// Catalog, when set, is the catalog the maps must be of, opened with
	// the application's DSN (a *catalog.Catalog): the client reads its
	// identity from it before it accepts a map, and checks against it
	// every map version it has not seen the catalog hold (one read per
	// new version): a map of another catalog, of a version the catalog
	// does not hold yet, or naming a server's DSN, replicas or primary
	// otherwise than the catalog does is refused.
	Catalog Verifier
	// CatalogID, when set, is the identity of the catalog the maps must
	// be of (catalog.Stamp.ID, shown by shardctl relay). With neither it
	// nor Catalog, the first map read fixes it.
	CatalogID string
	// Token is sent with every request (a relay on TCP with a token;
	// ReadTokenFile reads one). Empty: none.
	Token string
	// TLS, when not nil, speaks TLS to a relay on TCP: its RootCAs verify
	// the relay's certificate (ServerName defaults to the host of addr),
	// its Certificates are the client's own.
	TLS *tls.Config
	// RelayUIDs, when not empty, are the uids a relay on a Unix socket may
	// run as: the client reads the peer's uid from the kernel
	// (SO_PEERCRED) and refuses any other (ErrRelayPeer), so that a
	// process that took the socket's path first is not asked. Empty: any.
	RelayUIDs []int
}

// ErrRelayPeer reports a Unix socket served by a process of a uid the
// client does not expect of its relay (Options.RelayUIDs).
var ErrRelayPeer = errors.New("the process on the relay's socket runs as a uid not in Options.RelayUIDs: stop it and start the relay as its user, or fix the socket's path")

// Verifier is the catalog as a client checks a relay's maps against it.
// *catalog.Catalog is one.
type Verifier interface {
	Stamp(ctx context.Context) (catalog.Stamp, error)
}

// Dial returns a client of the relay at addr that checks only that every
// map is of one catalog: DialWith with zero Options.
func Dial(addr string) *Client {
	c, _ := DialWith(addr, Options{})
	return c
}

// DialWith returns a client of the relay at addr: a Unix socket path (or
// unix:PATH), or host:port for a relay on TCP. It connects on first use.
// TLS for a Unix socket is an error.
func DialWith(addr string, o Options) (*Client, error) {
	network, address := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, address = "unix", p
	} else if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, ".") {
		network = "unix"
	}
	if len(o.RelayUIDs) > 0 && network != "unix" {
		return nil, fmt.Errorf("relay %s: RelayUIDs are for a Unix socket; a relay on TCP is known by its certificate (Options.TLS)", addr)
	}
	uids := slices.Clone(o.RelayUIDs)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, address)
			if err != nil || len(uids) == 0 {
				return conn, err
			}
			uid, err := peerUID(conn.(*net.UnixConn))
			if err != nil {
				_ = conn.Close()
				return nil, fmt.Errorf("%w: %w", ErrRelayPeer, err)
			}
			if !slices.Contains(uids, uid) {
				_ = conn.Close()
				return nil, fmt.Errorf("%w: it runs as uid %d", ErrRelayPeer, uid)
			}
			return conn, nil
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     2 * longPoll,
	}
	base := "http://relay"
	if o.TLS != nil {
		if network != "tcp" {
			return nil, fmt.Errorf("relay %s: TLS is for a relay on TCP; a Unix socket checks its peers' uids instead", addr)
		}
		cfg := o.TLS.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return nil, fmt.Errorf("relay %s: want host:port: %w", addr, err)
			}
			cfg.ServerName = host
		}
		tr.TLSClientConfig = cfg
		tr.ForceAttemptHTTP2 = false
		base = "https://relay"
	}
	c := &Client{addr: addr, url: base, hc: &http.Client{Transport: tr}, token: o.Token, verify: o.Catalog}
	c.ids.want = o.CatalogID
	return c, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// get asks the relay for path with params and returns the status and
// body.
func (c *Client) get(ctx context.Context, path string, params url.Values) (int, []byte, error) {
	u := c.url + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		return 0, nil, fmt.Errorf("shardkit: relay %s: %w: %w", c.addr, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return 0, nil, fmt.Errorf("shardkit: relay %s: read the reply: %w", c.addr, err)
	}
	if len(body) > maxReply {
		return 0, nil, fmt.Errorf("shardkit: relay %s: %w: over %d bytes", c.addr, ErrBadReply, maxReply)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return 0, nil, fmt.Errorf("shardkit: relay %s: %w", c.addr, ErrUnauthorized)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotModified {
		return 0, nil, fmt.Errorf("shardkit: relay %s: %w: %s: %s", c.addr, ErrBadReply, resp.Status, strings.TrimSpace(string(body)))
	}
	return resp.StatusCode, body, nil
}

// Load reads the whole map.
func (c *Client) Load(ctx context.Context) (*router.Snapshot, error) {
	_, body, err := c.get(ctx, "/v1/map", nil)
	if err != nil {
		return nil, err
	}
	s, err := c.accept(ctx, body, nil)
	if err != nil {
		return nil, fmt.Errorf("shardkit: relay %s: %w", c.addr, err)
	}
	return c.keep(s), nil
}

// keep records s as the newest map read, unless a newer one is, and
// returns the newest.
func (c *Client) keep(s *router.Snapshot) *router.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.newest == nil || s.Version > c.newest.Version {
		c.newest = s
	}
	return c.newest
}

// setArrived keeps s, which a listener's wait brought, for the reload
// that follows.
func (c *Client) setArrived(s *router.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.arrived = s
}

// takeArrived returns the map a listener's wait brought, once.
func (c *Client) takeArrived() *router.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.arrived
	c.arrived = nil
	return a
}

func (c *Client) base() *router.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.newest
}

// mapAfter asks for the map once its version is past since's, waiting at
// most wait, and returns it (nil if wait ended first): the placements
// changed after since applied to it, or the whole map.
func (c *Client) mapAfter(ctx context.Context, since *router.Snapshot, wait time.Duration) (*router.Snapshot, error) {
	params := url.Values{"since": {strconv.FormatInt(since.Version, 10)}}
	if wait > 0 {
		params.Set("wait", wait.String())
	}
	status, body, err := c.get(ctx, "/v1/map", params)
	if err != nil || status == http.StatusNotModified {
		return nil, err
	}
	s, err := c.accept(ctx, body, since)
	if err != nil {
		return nil, fmt.Errorf("shardkit: relay %s: %w", c.addr, err)
	}
	return c.keep(s), nil
}

// MapVersion returns the version the relay serves.
func (c *Client) MapVersion(ctx context.Context) (int64, error) {
	_, body, err := c.get(ctx, "/v1/version", nil)
	if err != nil {
		return 0, err
	}
	var v wireVersion
	if err := json.Unmarshal(body, &v); err != nil || v.Version <= 0 {
		return 0, fmt.Errorf("shardkit: relay %s: %w: version reply %.100q", c.addr, ErrBadReply, body)
	}
	return v.Version, nil
}

// LoadChanges returns the map in force: since itself when the relay has
// nothing newer, else since with the placements that changed applied (or
// the whole map, when the relay no longer holds since's version). The map a
// listener's wait has just brought, when newer than since, is returned
// without asking the relay again.
func (c *Client) LoadChanges(ctx context.Context, since *router.Snapshot) (*router.Snapshot, error) {
	if since == nil {
		return c.Load(ctx)
	}
	if a := c.takeArrived(); a != nil && a.Version > since.Version {
		return a, nil
	}
	s, err := c.mapAfter(ctx, since, 0)
	if err != nil || s == nil {
		return since, err
	}
	return s, nil
}

// ListenMap returns a listener that waits on the relay for each version
// after the newest this client has read (loading the map first if it has
// read none): router.Router.WatchWith with Listen uses it. Each wait
// brings the changed placements with it, so the reload that follows a
// notification (LoadChanges) costs no second round trip.
func (c *Client) ListenMap(ctx context.Context) (router.Listener, error) {
	if c.base() == nil {
		if _, err := c.Load(ctx); err != nil {
			return nil, err
		}
	}
	return &listener{c: c}, nil
}

// listener long-polls the relay for maps past the client's newest.
type listener struct {
	c *Client
}

// WaitForNotification returns when the relay serves a version past the
// newest the client holds, as a notification on router.MapChannel whose
// payload is the version; the map itself is kept for LoadChanges.
func (l *listener) WaitForNotification(ctx context.Context) (*pgconn.Notification, error) {
	for {
		s, err := l.c.mapAfter(ctx, l.c.base(), longPoll)
		if err != nil {
			return nil, err
		}
		if s != nil {
			l.c.setArrived(s)
			return &pgconn.Notification{Channel: router.MapChannel, Payload: strconv.FormatInt(s.Version, 10)}, nil
		}
	}
}

func (l *listener) Close(context.Context) error { return nil }
