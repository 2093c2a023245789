package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// unreachableCatalog refuses connections at once: commands whose flags
// pass their checks fail there with exit status 1, never 0 or 2.
const unreachableCatalog = "postgres://postgres@127.0.0.1:1/catalog?sslmode=disable&connect_timeout=2"

// flagCase is one flag of one command, fuzzed: args builds the command
// line around the value; want says the exit status the value deserves.
type flagCase struct {
	args func(v string) []string
	want func(v string) int
}

// pflag reads integers with strconv.ParseInt base 0 (0x10, 1_000 too).
func intIn(v string, lo, hi int64) bool {
	n, err := strconv.ParseInt(v, 0, 64)
	return err == nil && n >= lo && n <= hi
}

func status(ok bool, okCode int) int {
	if ok {
		return okCode
	}
	return 2
}

var flagCases = []flagCase{
	{ // 0
		args: func(v string) []string { return []string{"shard-of", "--shards=" + v, "5"} },
		want: func(v string) int { return status(intIn(v, 1, 8192), 0) },
	},
	{ // 1
		args: func(v string) []string {
			return []string{"init", "--catalog", unreachableCatalog, "--server", "a=postgres://a", "--quiet", "--shards=" + v}
		},
		want: func(v string) int { return status(intIn(v, 1, 8192), 1) },
	},
	{ // 2
		args: func(v string) []string {
			return []string{"move", "--catalog", unreachableCatalog, "--shard", "1", "--to", "a", "--soak=" + v}
		},
		want: func(v string) int {
			d, err := time.ParseDuration(v)
			return status(err == nil && d >= 0, 1)
		},
	},
	{ // 3
		args: func(v string) []string {
			return []string{"rebalance", "--catalog", unreachableCatalog, "--max-moves=" + v}
		},
		want: func(v string) int { return status(intIn(v, 0, 1<<63-1), 1) },
	},
	{ // 4
		args: func(v string) []string {
			return []string{"rebalance", "--catalog", unreachableCatalog, "--parallel=" + v}
		},
		want: func(v string) int { return status(intIn(v, 1, 1<<63-1), 1) },
	},
	{ // 5
		args: func(v string) []string {
			return []string{"migrate", "--catalog", unreachableCatalog, "--quiet", "--batch=" + v}
		},
		want: func(v string) int { return status(intIn(v, 1, 1<<63-1), 1) },
	},
	{ // 6
		args: func(v string) []string {
			return []string{"move", "--catalog", unreachableCatalog, "--to", "a", "--shard=" + v}
		},
		want: func(v string) int {
			_, err := parseShardSpec(v)
			return status(err == nil, 1)
		},
	},
	{ // 7
		args: func(v string) []string {
			return []string{"rebalance", "--catalog", unreachableCatalog, "--servers=" + v}
		},
		want: func(v string) int {
			_, err := parseNames("--servers", v)
			return status(err == nil, 1)
		},
	},
	{ // 8
		args: func(v string) []string {
			return []string{"init", "--catalog", unreachableCatalog, "--quiet", "--server=" + v, "--server=b=postgres://b"}
		},
		want: func(v string) int {
			_, err := parseServers([]string{v, "b=postgres://b"}, nil, nil)
			return status(err == nil, 1)
		},
	},
	{ // 9
		args: func(v string) []string { return []string{"id", "decode", "--", v} },
		want: func(v string) int {
			_, err := parseID(v)
			return status(err == nil, 0)
		},
	},
	{ // 10
		args: func(v string) []string {
			return []string{"id", "compose", "--unix-ms", "1700000000000", "--seq", "0", "--shard=" + v}
		},
		want: func(v string) int { return status(intIn(v, 0, 8191), 0) },
	},
	{ // 11: a string key may be anything
		args: func(v string) []string { return []string{"shard-of", "--string", "--shards", "10", "--", v} },
		want: func(string) int { return 0 },
	},
}

// FuzzFlagValues puts arbitrary values into the flags of every command
// (and every positional argument that is parsed) and checks that the
// command line is accepted exactly when the value is valid: a bad value
// exits 2, a good one reaches the command (exit 0 for pure commands, 1
// for those that then fail to reach the catalog). Every refusal is one
// line on stderr, and nothing panics.
func FuzzFlagValues(f *testing.F) {
	seeds := []string{"0", "1", "-5", "9000", "8192", "0x10", "1_000", "", " 1", "-5s", "5s", "1h", "soon",
		"1,4-6", "6-2", "a,,b", "a,a", "a", "=x", "a=postgres://b", "b=postgres://b", "3236157012032419020", "x\ny", "\x00"}
	for i := range flagCases {
		for _, s := range seeds {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, v string) {
		c := flagCases[int(which)%len(flagCases)]
		args := c.args(v)
		code, out, errOut := shardctl(args...)
		if want := c.want(v); code != want {
			t.Fatalf("%q: exit %d, want %d (stderr %q)", args, code, want, errOut)
		}
		if code != 0 {
			if out != "" {
				t.Fatalf("%q: exit %d with output %q", args, code, out)
			}
			if !strings.HasPrefix(errOut, "shardctl: ") || strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") {
				t.Fatalf("%q: stderr %q is not one line", args, errOut)
			}
		}
	})
}
