package relay

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// ErrBadReply reports a relay reply that does not decode into a valid
// shard map (a relay of another version, or something else on the
// socket). The router keeps the map it has.
var ErrBadReply = errors.New("relay: malformed reply; is the socket a shardkit relay of this version?")

// wireMap is a relay's reply: the whole map (Since 0) or, for a client
// that named the version it holds, the placements that changed after it.
type wireMap struct {
	Version    int64           `json:"version"`
	Since      int64           `json:"since,omitempty"` // a delta from this version
	Shards     int             `json:"shards,omitempty"`
	Layout     *wireLayout     `json:"layout,omitempty"`
	Servers    []wireServer    `json:"servers"`
	Placements []wirePlacement `json:"placements"`
}

type wireLayout struct {
	EpochMs   int64 `json:"epoch_ms"`
	TimeBits  uint8 `json:"time_bits"`
	ShardBits uint8 `json:"shard_bits"`
	SeqBits   uint8 `json:"seq_bits"`
	SlotBits  uint8 `json:"slot_bits"`
}

type wireServer struct {
	Name     string   `json:"name"`
	DSN      string   `json:"dsn"`
	AdminDSN string   `json:"admin_dsn,omitempty"`
	Replicas []string `json:"replicas"`
	State    string   `json:"state"`
	// Primary is the recorded primary, which routers fenced by it need
	// as much as the DSN.
	Primary router.Primary `json:"primary,omitzero"`
}

type wirePlacement struct {
	Shard  int    `json:"shard"`
	Server string `json:"server"`
	Schema string `json:"schema"`
	State  string `json:"state"`
}

// wireVersion is the reply to a version request.
type wireVersion struct {
	Version int64 `json:"version"`
}

func toWireServers(ss []router.Server) []wireServer {
	out := make([]wireServer, len(ss))
	for i, s := range ss {
		out[i] = wireServer{Name: s.Name, DSN: s.DSN, AdminDSN: s.AdminDSN, Replicas: s.Replicas, State: s.State, Primary: s.Primary}
	}
	return out
}

func toWirePlacements(ps []router.Placement) []wirePlacement {
	out := make([]wirePlacement, len(ps))
	for i, p := range ps {
		out[i] = wirePlacement{Shard: p.Shard, Server: p.Server, Schema: p.Schema, State: string(p.State)}
	}
	return out
}

// fullMap is the wire form of s.
func fullMap(s *router.Snapshot) wireMap {
	l := s.Layout
	return wireMap{Version: s.Version, Shards: s.Shards,
		Layout:  &wireLayout{EpochMs: l.EpochMs, TimeBits: l.TimeBits, ShardBits: l.ShardBits, SeqBits: l.SeqBits, SlotBits: l.SlotBits},
		Servers: toWireServers(s.Servers()), Placements: toWirePlacements(s.Placements())}
}

// delta is the wire form of cur for a client holding old: the placements
// that differ. Both are versions of one map (same shard count).
func delta(old, cur *router.Snapshot) wireMap {
	was, now := old.Placements(), cur.Placements()
	var changed []router.Placement
	for i := range now {
		if now[i] != was[i] {
			changed = append(changed, now[i])
		}
	}
	return wireMap{Version: cur.Version, Since: old.Version, Servers: toWireServers(cur.Servers()), Placements: toWirePlacements(changed)}
}

// decodeMap reads a relay's map reply and builds the snapshot it
// describes: the whole map, or, when the reply is a delta, the next
// snapshot after since (which must be the version the delta starts from).
// Every snapshot it returns was checked as router.NewSnapshot checks one.
func decodeMap(body []byte, since *router.Snapshot) (*router.Snapshot, error) {
	var m wireMap
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if m.Version <= 0 {
		return nil, fmt.Errorf("%w: map version %d", ErrBadReply, m.Version)
	}
	servers := make([]router.Server, len(m.Servers))
	for i, s := range m.Servers {
		servers[i] = router.Server{Name: s.Name, DSN: s.DSN, AdminDSN: s.AdminDSN, Replicas: s.Replicas, State: s.State, Primary: s.Primary}
	}
	placements := make([]router.Placement, len(m.Placements))
	for i, p := range m.Placements {
		placements[i] = router.Placement{Shard: p.Shard, Server: p.Server, Schema: p.Schema, State: router.ShardState(p.State)}
	}
	if m.Since != 0 {
		if since == nil || m.Since != since.Version {
			return nil, fmt.Errorf("%w: a delta from version %d, not from the version held", ErrBadReply, m.Since)
		}
		if m.Version <= since.Version {
			return nil, fmt.Errorf("%w: a delta to version %d from version %d", ErrBadReply, m.Version, m.Since)
		}
		s, err := since.Next(m.Version, servers, placements)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
		}
		return s, nil
	}
	if m.Layout == nil {
		return nil, fmt.Errorf("%w: a whole map without its ID layout", ErrBadReply)
	}
	l := idgen.Layout{EpochMs: m.Layout.EpochMs, TimeBits: m.Layout.TimeBits, ShardBits: m.Layout.ShardBits, SeqBits: m.Layout.SeqBits, SlotBits: m.Layout.SlotBits}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if m.Shards > 1<<l.ShardBits {
		return nil, fmt.Errorf("%w: %d shards do not fit %d shard bits", ErrBadReply, m.Shards, l.ShardBits)
	}
	// Checked before the snapshot is built, which allocates by the shard
	// count: a reply cannot make the client allocate more than it sent.
	if len(placements) != m.Shards {
		return nil, fmt.Errorf("%w: %d placements for %d shards", ErrBadReply, len(placements), m.Shards)
	}
	s, err := router.NewSnapshot(m.Version, m.Shards, servers, placements)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	s.Layout = l
	return s, nil
}
