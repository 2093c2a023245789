package main

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseShardSpec: --shard never panics; a spec it accepts yields
// distinct, non-negative shards that each appear in the spec's ranges.
func FuzzParseShardSpec(f *testing.F) {
	for _, s := range []string{"5", "1-3", "1,4-6", "", "-1", "3-1", "1,,2", " 7 , 8", "0-100001", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		shards, err := parseShardSpec(spec)
		if err != nil {
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseShardSpec(%q): error %v is not a usage error", spec, err)
			}
			return
		}
		if len(shards) == 0 {
			t.Fatalf("parseShardSpec(%q) accepted the spec but returned no shards", spec)
		}
		seen := map[int]bool{}
		for _, s := range shards {
			if s < 0 || seen[s] {
				t.Fatalf("parseShardSpec(%q) = %v: negative or repeated shard %d", spec, shards, s)
			}
			seen[s] = true
		}
	})
}

// FuzzParseServers: --server/--replica never panic; accepted specs have a
// name and a DSN, and the DSN is everything after the first '=' (a DSN
// read from a file, @PATH, is left to TestDSNFromFile).
func FuzzParseServers(f *testing.F) {
	f.Add("a=postgres://h/db", "a=postgres://r/db")
	f.Add("a=host=x port=5432", "")
	f.Add("=x", "b=y")
	f.Add("a", "")
	f.Fuzz(func(t *testing.T, server, replica string) {
		var replicas []string
		if replica != "" {
			replicas = []string{replica}
		}
		if _, dsn, _ := strings.Cut(server, "="); strings.HasPrefix(dsn, "@") {
			return
		}
		specs, err := parseServers([]string{server}, nil, replicas)
		if err != nil {
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseServers(%q, %q): error %v is not a usage error", server, replica, err)
			}
			return
		}
		if len(specs) != 1 || specs[0].Name == "" || specs[0].DSN == "" {
			t.Fatalf("parseServers(%q) = %+v", server, specs)
		}
		if specs[0].Name+"="+specs[0].DSN != server || strings.Contains(specs[0].Name, "=") {
			t.Fatalf("parseServers(%q) split it as %q = %q", server, specs[0].Name, specs[0].DSN)
		}
	})
}
