package twophase

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"part", "shardkit:v1:a:1234:0123456789abcdef:1", true},
		{"long server", "shardkit:v1:" + "s" + strings.Repeat("x", 62) + ":18446744073709551615:0123456789abcdef:9999", true},
		{"other prefix", "citus_1_2_3_4", false},
		{"other version", "shardkit:v2:a:1:0123456789abcdef:1", false},
		{"no part", "shardkit:v1:a:1:0123456789abcdef", false},
		{"part zero", "shardkit:v1:a:1:0123456789abcdef:0", false},
		{"leading zero part", "shardkit:v1:a:1:0123456789abcdef:01", false},
		{"leading zero xid", "shardkit:v1:a:01:0123456789abcdef:1", false},
		{"quote in server", "shardkit:v1:a'b:1:0123456789abcdef:1", false},
		{"upper nonce", "shardkit:v1:a:1:0123456789ABCDEF:1", false},
		{"short nonce", "shardkit:v1:a:1:0123:1", false},
		{"extra field", "shardkit:v1:a:1:0123456789abcdef:1:2", false},
		{"negative part", "shardkit:v1:a:1:0123456789abcdef:-1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Parse(tt.in)
			if tt.ok != (err == nil) {
				t.Fatalf("Parse(%q) = %v, %v", tt.in, g, err)
			}
			if err != nil && !errors.Is(err, ErrBadGID) {
				t.Fatalf("error %v is not ErrBadGID", err)
			}
			if err == nil && g.String() != tt.in {
				t.Fatalf("String() = %q, want %q", g.String(), tt.in)
			}
			if err == nil && len(g.String()) > 199 {
				t.Fatalf("GID of %d bytes, PostgreSQL takes 199", len(g.String()))
			}
		})
	}
}

func TestLiteral(t *testing.T) {
	n, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	g := Decision{Coordinator: "shard-1", XID: 77, Nonce: n}.Part(2)
	if got, want := g.Literal(), "'shardkit:v1:shard-1:77:"+n+":2'"; got != want {
		t.Fatalf("Literal() = %s, want %s", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Literal of an invalid GID did not panic")
		}
	}()
	_ = Decision{Coordinator: "a'; DROP TABLE x; --", XID: 1, Nonce: n}.Part(1).Literal()
}

func TestDecisionPrefix(t *testing.T) {
	p, err := DecisionPrefix("a")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDecision(p + "42:0123456789abcdef")
	if err != nil || d.XID != 42 || d.Coordinator != "a" {
		t.Fatalf("ParseDecision = %+v, %v", d, err)
	}
	if _, err := DecisionPrefix("A:b"); !errors.Is(err, ErrBadGID) {
		t.Fatalf("DecisionPrefix of a bad name: %v", err)
	}
}

// FuzzParse checks that whatever Parse accepts prints back to the same
// text and quotes as a literal holding exactly that text.
func FuzzParse(f *testing.F) {
	f.Add("shardkit:v1:a:1234:0123456789abcdef:1")
	f.Add("shardkit:v1:a'b:1:0123456789abcdef:1")
	f.Add("shardkit:v1:a:1:0123456789abcdef")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrBadGID) {
				t.Fatalf("error %v is not ErrBadGID", err)
			}
			return
		}
		if g.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, g.String())
		}
		lit := g.Literal()
		if lit != "'"+s+"'" || strings.ContainsAny(s, "'\\\x00") || len(s) > 199 {
			t.Fatalf("Literal of %q = %s", s, lit)
		}
		d, err := ParseDecision(g.Decision.String())
		if err != nil || d != g.Decision {
			t.Fatalf("ParseDecision(%q) = %+v, %v", g.Decision.String(), d, err)
		}
	})
}
