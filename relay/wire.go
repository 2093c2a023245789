package relay

import (
	"bytes"
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
	// Catalog is the identity of the catalog the map is of (catalog.Stamp.ID),
	// and Epoch its history (router.Snapshot.CatalogEpoch).
	Catalog    string          `json:"catalog,omitempty"`
	Epoch      string          `json:"epoch,omitempty"`
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
	Replicas []string `json:"replicas"`
	State    string   `json:"state"`
	// Primary is the recorded primary, which routers fenced by it need
	// as much as the DSN.
	Primary router.Primary `json:"primary,omitzero"`
	// AdminApart: the server has an admin DSN apart from DSN, which a
	// relay never serves (router.Server.AdminHidden).
	AdminApart bool `json:"admin_apart,omitempty"`
	// Link is the catalog's record of how DSN reaches the server
	// (router.Link's String: "direct", "pooled"), "" when none.
	Link string `json:"link,omitempty"`
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
		out[i] = wireServer{Name: s.Name, DSN: s.DSN, Replicas: s.Replicas, State: s.State, AdminApart: s.AdminHidden || (s.AdminDSN != "" && s.AdminDSN != s.DSN), Link: wireLink(s.Link), Primary: s.Primary}
	}
	return out
}

// wireLink is a server's link on the wire: "" when unrecorded.
func wireLink(l router.Link) string {
	if l == router.LinkUnrecorded {
		return ""
	}
	return l.String()
}

// linkOfWire reads wireLink; anything else is unrecorded.
func linkOfWire(s string) router.Link {
	switch s {
	case "direct":
		return router.LinkDirect
	case "pooled":
		return router.LinkPooled
	}
	return router.LinkUnrecorded
}

func toWirePlacements(ps []router.Placement) []wirePlacement {
	out := make([]wirePlacement, len(ps))
	for i, p := range ps {
		out[i] = wirePlacement{Shard: p.Shard, Server: p.Server, Schema: p.Schema, State: string(p.State)}
	}
	return out
}

// fullMap is the wire form of s, a map of catalog id.
func fullMap(s *router.Snapshot, id string) wireMap {
	l := s.Layout
	return wireMap{Catalog: id, Epoch: s.CatalogEpoch, Version: s.Version, Shards: s.Shards,
		Layout:  &wireLayout{EpochMs: l.EpochMs, TimeBits: l.TimeBits, ShardBits: l.ShardBits, SeqBits: l.SeqBits, SlotBits: l.SlotBits},
		Servers: toWireServers(s.Servers()), Placements: toWirePlacements(s.Placements())}
}

// delta is the wire form of cur for a client holding old: the placements
// that differ. Both are versions of one map (same shard count), of
// catalog id.
func delta(old, cur *router.Snapshot, id string) wireMap {
	was, now := old.Placements(), cur.Placements()
	var changed []router.Placement
	for i := range now {
		if now[i] != was[i] {
			changed = append(changed, now[i])
		}
	}
	return wireMap{Catalog: id, Epoch: cur.CatalogEpoch, Version: cur.Version, Since: old.Version, Servers: toWireServers(cur.Servers()), Placements: toWirePlacements(changed)}
}

// Bounds on a reply. A catalog's map version grows by one a change, so
// neither bound is reached by a real catalog.
const (
	maxServers     = 1 << 12 // servers a reply may name
	maxVersion     = 1 << 40 // map versions a reply may carry: below this
	maxVersionStep = 1 << 20 // how far past the client's version a reply may go
)

// wireMapLists is wireMap with its lists left undecoded, so that their
// lengths are checked against the map's shard count before anything is
// allocated by them: a reply of millions of empty placements costs its
// own bytes, not tens of times as much.
type wireMapLists struct {
	Catalog    string          `json:"catalog,omitempty"`
	Epoch      string          `json:"epoch,omitempty"`
	Version    int64           `json:"version"`
	Since      int64           `json:"since,omitempty"`
	Shards     int             `json:"shards,omitempty"`
	Layout     *wireLayout     `json:"layout,omitempty"`
	Servers    json.RawMessage `json:"servers"`
	Placements json.RawMessage `json:"placements"`
}

// decodeList decodes a JSON array of at most max items, refusing the
// item past max before decoding it.
func decodeList[T any](raw json.RawMessage, max int, what string) ([]T, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, fmt.Errorf("%w: %s: not a list", ErrBadReply, what)
	}
	var out []T
	for dec.More() {
		if len(out) >= max {
			return nil, fmt.Errorf("%w: over %d %s", ErrBadReply, max, what)
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadReply, what, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// decodeMap reads a relay's map reply and builds the snapshot it
// describes: the whole map, or, when the reply is a delta, the next
// snapshot after since (which must be the version the delta starts from).
// Every snapshot it returns was checked as router.NewSnapshot checks one.
// It checks no identity: the client does (Client.accept), between
// decodeHead and decodeLists.
func decodeMap(body []byte, since *router.Snapshot) (*router.Snapshot, error) {
	raw, err := decodeHead(body, since)
	if err != nil {
		return nil, err
	}
	return decodeLists(raw, since)
}

// decodeHead reads a reply's fields but not its lists, and checks its
// version's bounds: what a refusal needs, allocated by no more than the
// reply's own bytes.
func decodeHead(body []byte, since *router.Snapshot) (*wireMapLists, error) {
	var raw wireMapLists
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if raw.Version <= 0 || raw.Version >= maxVersion {
		return nil, fmt.Errorf("%w: map version %d", ErrBadReply, raw.Version)
	}
	// A router keeps the highest version it saw and ignores lower ones: a
	// version far past the one held would stop it following the catalog.
	if since != nil && raw.Version > since.Version+maxVersionStep {
		return nil, fmt.Errorf("%w: map version %d, %d past the version held (%d): more changes than a catalog makes between two polls",
			ErrBadReply, raw.Version, raw.Version-since.Version, since.Version)
	}
	return &raw, nil
}

// decodeServers decodes the reply's servers, at most maxServers.
func decodeServers(raw *wireMapLists) ([]router.Server, error) {
	ws, err := decodeList[wireServer](raw.Servers, maxServers, "servers")
	if err != nil {
		return nil, err
	}
	servers := make([]router.Server, len(ws))
	for i, s := range ws {
		servers[i] = router.Server{Name: s.Name, DSN: s.DSN, Replicas: s.Replicas, State: s.State, AdminHidden: s.AdminApart, Link: linkOfWire(s.Link), Primary: s.Primary}
	}
	return servers, nil
}

// decodeLists decodes the reply's servers and placements and builds the
// snapshot (see decodeMap).
func decodeLists(raw *wireMapLists, since *router.Snapshot) (*router.Snapshot, error) {
	servers, err := decodeServers(raw)
	if err != nil {
		return nil, err
	}
	return decodePlacements(raw, since, servers)
}

// decodePlacements decodes the reply's placements and builds the
// snapshot on servers.
func decodePlacements(raw *wireMapLists, since *router.Snapshot, servers []router.Server) (*router.Snapshot, error) {
	// A whole map has at most as many placements as its shards, and its
	// shard count fits its layout (checked below); a delta at most as many
	// as the map it applies to.
	maxPlacements := 0
	switch {
	case raw.Since != 0 && since != nil:
		maxPlacements = since.Shards
	case raw.Since == 0 && raw.Layout != nil && raw.Layout.ShardBits < 31:
		maxPlacements = min(raw.Shards, 1<<raw.Layout.ShardBits)
	}
	wps, err := decodeList[wirePlacement](raw.Placements, maxPlacements, "placements")
	if err != nil {
		return nil, err
	}
	placements := make([]router.Placement, len(wps))
	for i, p := range wps {
		placements[i] = router.Placement{Shard: p.Shard, Server: p.Server, Schema: p.Schema, State: router.ShardState(p.State)}
	}
	if raw.Since != 0 {
		if since == nil || raw.Since != since.Version {
			return nil, fmt.Errorf("%w: a delta from version %d, not from the version held", ErrBadReply, raw.Since)
		}
		if raw.Version <= since.Version {
			return nil, fmt.Errorf("%w: a delta to version %d from version %d", ErrBadReply, raw.Version, raw.Since)
		}
		s, err := since.Next(raw.Version, servers, placements)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
		}
		if raw.Epoch != "" {
			s.CatalogEpoch = raw.Epoch
		}
		return s, nil
	}
	if raw.Layout == nil {
		return nil, fmt.Errorf("%w: a whole map without its ID layout", ErrBadReply)
	}
	l := idgen.Layout{EpochMs: raw.Layout.EpochMs, TimeBits: raw.Layout.TimeBits, ShardBits: raw.Layout.ShardBits, SeqBits: raw.Layout.SeqBits, SlotBits: raw.Layout.SlotBits}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	if raw.Shards > 1<<l.ShardBits {
		return nil, fmt.Errorf("%w: %d shards do not fit %d shard bits", ErrBadReply, raw.Shards, l.ShardBits)
	}
	// Checked before the snapshot is built, which allocates by the shard
	// count: a reply cannot make the client allocate more than it sent.
	if len(placements) != raw.Shards {
		return nil, fmt.Errorf("%w: %d placements for %d shards", ErrBadReply, len(placements), raw.Shards)
	}
	s, err := router.NewSnapshot(raw.Version, raw.Shards, servers, placements)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	s.Layout = l
	s.CatalogEpoch = raw.Epoch
	return s, nil
}
