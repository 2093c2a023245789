package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on what a request may store. Lengths count characters (Unicode
// code points), not bytes: "é" is one character.
const (
	MaxNameChars    = 100
	MaxCaptionChars = 2200
	MaxURLChars     = 2048
	// MaxDimension bounds a photo's width and height, in pixels.
	MaxDimension = 100_000
)

// checkText refuses a string Postgres text cannot hold (a NUL byte, bytes
// that are not UTF-8) or longer than max characters, or empty when
// required.
func checkText(field, s string, required bool, max int) error {
	switch {
	case required && s == "":
		return fmt.Errorf("%w: %s is required (1 to %d characters)", ErrInvalid, field, max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: %s contains a NUL character", ErrInvalid, field)
	case utf8.RuneCountInString(s) > max:
		return fmt.Errorf("%w: %s has %d characters, at most %d are allowed", ErrInvalid, field, utf8.RuneCountInString(s), max)
	}
	return nil
}

// checkDimension refuses a width or height outside 0..MaxDimension.
func checkDimension(field string, v int) error {
	if v < 0 || v > MaxDimension {
		return fmt.Errorf("%w: %s %d: want 0 to %d pixels", ErrInvalid, field, v, MaxDimension)
	}
	return nil
}

// checkID refuses an ID that cannot name a row of this service: not
// positive, or with shard bits naming a logical shard the map does not
// have. Such an ID is malformed input, not a missing row.
func (s *Store) checkID(field string, id int64) error {
	if id <= 0 {
		return fmt.Errorf("%w: %s %d: IDs are positive", ErrInvalid, field, id)
	}
	snap := s.rt.Snapshot()
	shard, err := snap.Layout.ShardOf(id)
	if err != nil {
		return fmt.Errorf("%w: %s %d: %w", ErrInvalid, field, id, err)
	}
	if shard >= snap.Shards {
		return fmt.Errorf("%w: %s %d is not an ID of this service: its shard bits name shard %d, and there are %d shards",
			ErrInvalid, field, id, shard, snap.Shards)
	}
	return nil
}

// MaxUsernameChars bounds a username.
const MaxUsernameChars = 30

// checkUsername accepts 1 to MaxUsernameChars of a-z, 0-9 and _.
func checkUsername(s string) error {
	if s == "" || len(s) > MaxUsernameChars {
		return fmt.Errorf("%w: username must have 1 to %d characters", ErrInvalid, MaxUsernameChars)
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return fmt.Errorf("%w: username may hold only a-z, 0-9 and _", ErrInvalid)
		}
	}
	return nil
}
