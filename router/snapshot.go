package router

import (
	"fmt"
	"slices"
	"sort"

	"github.com/shardkit/shardkit/idgen"
)

// ShardState is the state of a logical shard in the shard map.
type ShardState string

// Shard states.
const (
	// StateActive: the shard takes reads and writes on its server.
	StateActive ShardState = "active"
	// StateMoving: a copy to another server is under way; the shard still
	// takes reads and writes on its current server.
	StateMoving ShardState = "moving"
	// StateFenced: a move is cutting over; writes wait (bounded), reads go on.
	StateFenced ShardState = "fenced"
)

// Valid reports whether s is a known state.
func (s ShardState) Valid() bool {
	return s == StateActive || s == StateMoving || s == StateFenced
}

// Server is a physical Postgres server in the catalog. It has two DSNs
// for its primary: DSN, which application traffic uses and which may name
// a connection pooler in transaction mode, and AdminDSN, which
// administration and logical replication use (shard moves, provisioning,
// migrations, backups) and which must reach the server directly: a
// replication connection, a session lock or a session setting does not
// survive a transaction pooler.
type Server struct {
	Name     string   `json:"name"`
	DSN      string   `json:"-"` // application traffic (may be a pooler); never printed (it may hold a password)
	AdminDSN string   `json:"-"` // administration and replication (direct); "" means DSN; never printed
	Replicas []string `json:"-"` // read replica DSNs, possibly none
	State    string   `json:"state"`
	// Primary is the cluster the catalog records as the server's primary
	// (see Primary): the plugin uses no host that is not it.
	Primary Primary `json:"primary,omitzero"`
	// AdminHidden: the server has an admin DSN apart from DSN that this
	// snapshot does not carry. Application processes' snapshots hold no
	// admin DSN (catalog.Catalog.Operator's do).
	AdminHidden bool `json:"-"`
	// Link is what the catalog records of how DSN reaches the server:
	// directly or through a connection pooler (see Direct).
	Link Link `json:"-"`
}

// Link says how a server's application DSN reaches the server.
type Link uint8

const (
	// LinkUnrecorded: the catalog records nothing (a server registered
	// before catalog version 15, or whose DSNs did not parse): Direct
	// infers it from the DSNs.
	LinkUnrecorded Link = iota
	// LinkDirect: DSN reaches the server itself, whichever user it logs
	// in as.
	LinkDirect
	// LinkPooled: DSN reaches a connection pooler in front of the server.
	LinkPooled
)

// String names the link as shardctl's flags do: "direct", "pooled", or
// "unrecorded".
func (l Link) String() string {
	switch l {
	case LinkDirect:
		return "direct"
	case LinkPooled:
		return "pooled"
	}
	return "unrecorded"
}

// Admin returns the DSN that administration and replication use:
// AdminDSN, or DSN when the server has no separate one; "" when the
// snapshot does not carry the server's admin DSN (AdminHidden).
func (s Server) Admin() string {
	if s.AdminDSN != "" {
		return s.AdminDSN
	}
	if s.AdminHidden {
		return ""
	}
	return s.DSN
}

// Direct reports whether DSN reaches the server itself, with no pooler
// in between: what the catalog records (Link), or, when it records
// nothing, whether DSN is the server's admin DSN too.
func (s Server) Direct() bool {
	switch s.Link {
	case LinkDirect:
		return true
	case LinkPooled:
		return false
	}
	return (s.AdminDSN == "" && !s.AdminHidden) || s.AdminDSN == s.DSN
}

// Placement says where a logical shard lives.
type Placement struct {
	Shard  int        `json:"shard"`
	Server string     `json:"server"`
	Schema string     `json:"schema"`
	State  ShardState `json:"state"`
}

// Snapshot is one immutable version of the shard map. Every statement is
// routed with exactly one snapshot; a new map version is a new Snapshot.
// Do not modify a Snapshot after NewSnapshot returns it.
type Snapshot struct {
	Version int64
	Shards  int          // logical shard count
	Layout  idgen.Layout // the catalog's ID layout
	// CatalogEpoch identifies the catalog's history the snapshot was read
	// from (its server's system identifier and timeline): a catalog that
	// failed over or was restored has another, and its versions are not
	// comparable with this snapshot's. "" when unknown.
	CatalogEpoch string
	// chunks holds the placements by shard number, chunkSize to a chunk:
	// the next version (Next) shares the chunks it does not change, so
	// that a move's new version costs a router a few chunks, not a copy
	// of the whole map.
	chunks  [][]Placement
	servers map[string]Server
}

// chunkSize is the placements of one chunk of a Snapshot.
const chunkSize = 64

// placement returns shard's placement; shard is in range.
func (s *Snapshot) placement(shard int) Placement {
	return s.chunks[uint(shard)/chunkSize][uint(shard)%chunkSize]
}

// each calls fn with every placement, by shard number.
func (s *Snapshot) each(fn func(Placement)) {
	for _, c := range s.chunks {
		for _, p := range c {
			fn(p)
		}
	}
}

// NewSnapshot builds a snapshot and checks it: every shard 0..shards-1 is
// placed exactly once, on a server in servers, with a valid state.
func NewSnapshot(version int64, shards int, servers []Server, placements []Placement) (*Snapshot, error) {
	if shards <= 0 {
		return nil, fmt.Errorf("%w: %d", ErrInvalidShardCount, shards)
	}
	byName, err := serverMap(servers)
	if err != nil {
		return nil, err
	}
	all := make([]Placement, shards)
	s := &Snapshot{Version: version, Shards: shards, servers: byName}
	for lo := 0; lo < shards; lo += chunkSize {
		s.chunks = append(s.chunks, all[lo:min(lo+chunkSize, shards):min(lo+chunkSize, shards)])
	}
	seen := make([]bool, shards)
	for _, p := range placements {
		p, err := checkPlacement(p, shards, byName)
		if err != nil {
			return nil, err
		}
		if seen[p.Shard] {
			return nil, fmt.Errorf("%w: shard %d is placed twice", ErrBadCatalog, p.Shard)
		}
		seen[p.Shard] = true
		all[p.Shard] = p
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("%w: shard %d has no row in the shard map", ErrBadCatalog, i)
		}
	}
	return s, nil
}

// Next returns the snapshot of map version version made from s: servers
// replace s's servers, and changed replaces the placements of its shards;
// the shard count and the layout are s's (both are fixed for a catalog's
// lifetime). The changed placements are checked as NewSnapshot checks
// them, and every shard must stay on a server of servers. It lets a
// router apply the rows that changed since s rather than read and check
// the whole map again.
func (s *Snapshot) Next(version int64, servers []Server, changed []Placement) (*Snapshot, error) {
	byName, err := serverMap(servers)
	if err != nil {
		return nil, err
	}
	n := &Snapshot{Version: version, Shards: s.Shards, Layout: s.Layout, CatalogEpoch: s.CatalogEpoch, chunks: slices.Clone(s.chunks), servers: byName}
	copied := map[int]bool{}
	for _, p := range changed {
		p, err := checkPlacement(p, s.Shards, byName)
		if err != nil {
			return nil, err
		}
		c := p.Shard / chunkSize
		if !copied[c] {
			n.chunks[c] = slices.Clone(n.chunks[c])
			copied[c] = true
		}
		n.chunks[c][p.Shard%chunkSize] = p
	}
	for name := range s.servers {
		if _, ok := byName[name]; ok {
			continue
		}
		// A server left the catalog: no shard may stay on it.
		if on := n.ShardsOn(name); len(on) > 0 {
			return nil, fmt.Errorf("%w: shard %d is placed on unknown server %q", ErrBadCatalog, on[0], name)
		}
	}
	return n, nil
}

// serverMap indexes servers by name, refusing an empty or repeated name.
func serverMap(servers []Server) (map[string]Server, error) {
	m := make(map[string]Server, len(servers))
	for _, srv := range servers {
		if srv.Name == "" {
			return nil, fmt.Errorf("%w: a server has an empty name", ErrBadCatalog)
		}
		if _, dup := m[srv.Name]; dup {
			return nil, fmt.Errorf("%w: server %q appears twice", ErrBadCatalog, srv.Name)
		}
		m[srv.Name] = srv
	}
	return m, nil
}

// checkPlacement checks one shard-map row against the shard count and the
// servers, and fills in its schema name when empty.
func checkPlacement(p Placement, shards int, servers map[string]Server) (Placement, error) {
	if p.Shard < 0 || p.Shard >= shards {
		return p, fmt.Errorf("%w: shard map row for shard %d is outside [0, %d)", ErrBadCatalog, p.Shard, shards)
	}
	if _, ok := servers[p.Server]; !ok {
		return p, fmt.Errorf("%w: shard %d is placed on unknown server %q", ErrBadCatalog, p.Shard, p.Server)
	}
	if !p.State.Valid() {
		return p, fmt.Errorf("%w: shard %d has unknown state %q", ErrBadCatalog, p.Shard, p.State)
	}
	if p.Schema == "" {
		p.Schema = SchemaName(p.Shard)
	}
	if n, err := ParseSchemaName(p.Schema); err != nil || n != p.Shard {
		return p, fmt.Errorf("%w: shard %d has schema %q, want %q", ErrBadCatalog, p.Shard, p.Schema, SchemaName(p.Shard))
	}
	return p, nil
}

// Placement returns where a logical shard lives.
func (s *Snapshot) Placement(shard int) (Placement, error) {
	if shard < 0 || shard >= s.Shards {
		return Placement{}, fmt.Errorf("%w: shard %d, map has %d shards", ErrShardOutOfRange, shard, s.Shards)
	}
	return s.placement(shard), nil
}

// Placements returns a copy of every placement, by shard number.
func (s *Snapshot) Placements() []Placement {
	out := make([]Placement, 0, s.Shards)
	s.each(func(p Placement) { out = append(out, p) })
	return out
}

// Server returns a server by name.
func (s *Snapshot) Server(name string) (Server, bool) {
	srv, ok := s.servers[name]
	return srv, ok
}

// Servers returns every server, sorted by name.
func (s *Snapshot) Servers() []Server {
	out := make([]Server, 0, len(s.servers))
	for _, srv := range s.servers {
		out = append(out, srv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ShardsOn returns the shards placed on a server, in order.
func (s *Snapshot) ShardsOn(server string) []int {
	var out []int
	s.each(func(p Placement) {
		if p.Server == server {
			out = append(out, p.Shard)
		}
	})
	return out
}
