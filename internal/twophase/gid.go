package twophase

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Prefix starts every GID shardkit prepares; a resolver lists prepared
// transactions by it and leaves every other one alone.
const Prefix = "shardkit:v1:"

// ErrBadGID reports a GID that is not one of shardkit's, or a part that
// cannot go into one.
var ErrBadGID = errors.New("not a shardkit transaction identifier")

// serverRE is the server name the catalog accepts (see migrations).
var serverRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

var nonceRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// MaxParts bounds the participants of one transaction (a part number has
// at most four digits), which keeps a GID under PostgreSQL's 200 bytes.
const MaxParts = 9999

// Decision identifies one atomic transaction: the coordinator server whose
// local transaction (XID) records the commit decision, and a nonce that
// tells it apart from another transaction given the same XID (a server
// restored from a backup reuses XIDs).
type Decision struct {
	Coordinator string
	XID         uint64
	Nonce       string
}

// GID is the identifier of one participant's prepared part of a
// Decision. Part 0 is the coordinator's own transaction, which commits
// locally and is never prepared.
type GID struct {
	Decision
	Part int
}

// NewNonce returns 16 random hex digits.
func NewNonce() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Validate checks that d can be written into a GID.
func (d Decision) Validate() error {
	if !serverRE.MatchString(d.Coordinator) {
		return fmt.Errorf("%w: server name %q", ErrBadGID, d.Coordinator)
	}
	if !nonceRE.MatchString(d.Nonce) {
		return fmt.Errorf("%w: nonce %q", ErrBadGID, d.Nonce)
	}
	return nil
}

// String returns the decision's identifier, the key of its decision row.
func (d Decision) String() string {
	return Prefix + d.Coordinator + ":" + strconv.FormatUint(d.XID, 10) + ":" + d.Nonce
}

// Part returns the GID of participant n (1 or more) of the decision.
func (d Decision) Part(n int) GID { return GID{Decision: d, Part: n} }

// String returns the GID.
func (g GID) String() string { return g.Decision.String() + ":" + strconv.Itoa(g.Part) }

// Literal returns the GID as an SQL string literal, for PREPARE
// TRANSACTION, COMMIT PREPARED and ROLLBACK PREPARED, which take no bind
// parameters. It panics on a GID that does not validate: the caller
// builds GIDs from validated parts only, so that is a bug, never input.
func (g GID) Literal() string {
	if err := g.Decision.Validate(); err != nil || g.Part < 1 || g.Part > MaxParts {
		panic(fmt.Sprintf("twophase: literal of an invalid GID %q", g.String()))
	}
	return "'" + strings.ReplaceAll(g.String(), "'", "''") + "'"
}

// DecisionPrefix is the start of a decision's identifier up to its XID,
// for the coordinator to complete with its own XID (see ParseDecision).
func DecisionPrefix(coordinator string) (string, error) {
	if !serverRE.MatchString(coordinator) {
		return "", fmt.Errorf("%w: server name %q", ErrBadGID, coordinator)
	}
	return Prefix + coordinator + ":", nil
}

// ParseDecision parses a decision identifier (a GID without its part).
func ParseDecision(s string) (Decision, error) {
	f, ok := fields(s, 3)
	if !ok {
		return Decision{}, fmt.Errorf("%w: %q", ErrBadGID, s)
	}
	return decision(s, f)
}

// Parse parses a prepared part's GID.
func Parse(s string) (GID, error) {
	f, ok := fields(s, 4)
	if !ok {
		return GID{}, fmt.Errorf("%w: %q", ErrBadGID, s)
	}
	d, err := decision(s, f)
	if err != nil {
		return GID{}, err
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n < 1 || n > MaxParts || strconv.Itoa(n) != f[3] {
		return GID{}, fmt.Errorf("%w: part in %q", ErrBadGID, s)
	}
	return GID{Decision: d, Part: n}, nil
}

func fields(s string, n int) ([]string, bool) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return nil, false
	}
	f := strings.Split(rest, ":")
	return f, len(f) == n
}

func decision(s string, f []string) (Decision, error) {
	xid, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || strconv.FormatUint(xid, 10) != f[1] {
		return Decision{}, fmt.Errorf("%w: transaction ID in %q", ErrBadGID, s)
	}
	d := Decision{Coordinator: f[0], XID: xid, Nonce: f[2]}
	if err := d.Validate(); err != nil {
		return Decision{}, err
	}
	return d, nil
}
