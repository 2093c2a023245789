package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// Errors of a map the client does not take for its catalog's. The
// router keeps the map it has (and asks again at the next version).
// Test with errors.Is.
var (
	// ErrOtherCatalog reports a map of another catalog than the client's
	// (Options.Catalog or Options.CatalogID, else the first map's).
	ErrOtherCatalog = errors.New("the relay serves the map of another catalog than this client's: point the client at its catalog's relay, or the relay at the client's catalog")
	// ErrVersionAhead reports a map version the catalog does not hold: not
	// the catalog's map (something else answers on the relay's address),
	// or a catalog that lost the commits the relay saw.
	ErrVersionAhead = errors.New("the relay serves a map version the catalog does not hold: find what answers on the relay's address")
	// ErrServersDiffer reports a map naming a server's DSN, replicas or
	// recorded primary otherwise than the catalog: a relay behind the
	// catalog, which catches up, or a map that is not the catalog's.
	ErrServersDiffer = errors.New("the relay's map names a server's DSN, replicas or primary otherwise than the catalog")
)

// identities is what a client knows of its catalog.
type identities struct {
	want     string          // the catalog id every map must carry; "" until known
	verified int64           // the newest map version the catalog was seen to hold
	servers  []router.Server // the servers of the newest map checked against the catalog
}

// accept decodes a reply and checks it is its catalog's map before it
// decodes the placements: its identity, then (with Options.Catalog) a
// version the catalog holds, then servers as the catalog has them. A
// refused reply allocates about its own size (the undecoded lists), not
// the map it describes.
func (c *Client) accept(ctx context.Context, body []byte, since *router.Snapshot) (*router.Snapshot, error) {
	raw, err := decodeHead(body, since)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	ids := c.ids
	c.mu.Unlock()
	var st *catalog.Stamp
	stamp := func() (*catalog.Stamp, error) {
		if st == nil {
			s, err := c.verify.Stamp(ctx)
			if err != nil {
				return nil, fmt.Errorf("check the map against the catalog: %w", err)
			}
			st = &s
		}
		return st, nil
	}
	if ids.want == "" && c.verify != nil {
		s, err := stamp()
		if err != nil {
			return nil, err
		}
		ids.want = s.ID
	}
	if ids.want != "" && raw.Catalog != ids.want {
		if raw.Catalog == "" {
			return nil, fmt.Errorf("%w: the map carries no catalog identity (a relay older than this client?); this client's catalog is %s", ErrOtherCatalog, ids.want)
		}
		return nil, fmt.Errorf("%w: the map is of catalog %s, this client's is %s", ErrOtherCatalog, raw.Catalog, ids.want)
	}
	if c.verify != nil && raw.Version > ids.verified {
		s, err := stamp()
		if err != nil {
			return nil, err
		}
		if s.ID != raw.Catalog {
			return nil, fmt.Errorf("%w: the map is of catalog %s, the client's Catalog is %s", ErrOtherCatalog, raw.Catalog, s.ID)
		}
		if raw.Version > s.Version {
			return nil, fmt.Errorf("%w: map version %d, the catalog's is %d", ErrVersionAhead, raw.Version, s.Version)
		}
	}
	servers, err := decodeServers(raw)
	if err != nil {
		return nil, err
	}
	if c.verify != nil && !sameServers(servers, ids.servers) {
		s, err := stamp()
		if err != nil {
			return nil, err
		}
		if err := serversOf(s, servers, raw.Version); err != nil {
			return nil, err
		}
	}
	snap, err := decodePlacements(raw, since, servers)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids.want == "" {
		c.ids.want = raw.Catalog
	}
	if c.verify != nil {
		if st != nil {
			c.ids.verified = max(c.ids.verified, st.Version)
		}
		c.ids.servers = servers
	}
	return snap, nil
}

// sameServers reports whether a and b name the same servers with the same
// DSNs, replicas and primaries, in the same order.
func sameServers(a, b []router.Server) bool {
	return slices.EqualFunc(a, b, func(x, y router.Server) bool {
		return x.Name == y.Name && x.DSN == y.DSN && slices.Equal(x.Replicas, y.Replicas) && x.Primary == y.Primary
	})
}

// serversOf checks that every server of a map of version v is one of the
// catalog's, with its DSN, replicas and recorded primary: what a router
// connects to, and the primary it accepts there (a primary of the past
// would let a router use an old primary that came back).
func serversOf(st *catalog.Stamp, servers []router.Server, v int64) error {
	why := "the map is not the catalog's"
	if st.Version > v {
		why = fmt.Sprintf("the relay is behind the catalog (map version %d, the catalog's %d), or the map is not the catalog's", v, st.Version)
	}
	for _, s := range servers {
		i := slices.IndexFunc(st.Servers, func(c router.Server) bool { return c.Name == s.Name })
		switch {
		case i < 0:
			return fmt.Errorf("%w: server %s is not in the catalog: %s", ErrServersDiffer, s.Name, why)
		case st.Servers[i].DSN != s.DSN:
			return fmt.Errorf("%w: server %s's DSN: %s", ErrServersDiffer, s.Name, why)
		case !slices.Equal(st.Servers[i].Replicas, s.Replicas):
			return fmt.Errorf("%w: server %s's replicas: %s", ErrServersDiffer, s.Name, why)
		case st.Servers[i].Primary != s.Primary:
			return fmt.Errorf("%w: server %s's primary (%v, the catalog's %v): %s", ErrServersDiffer, s.Name, s.Primary, st.Servers[i].Primary, why)
		}
	}
	return nil
}
