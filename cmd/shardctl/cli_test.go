package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// shardctl runs the command line in-process and returns its exit status,
// stdout and stderr.
func shardctl(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := runIO(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestIDDecode(t *testing.T) {
	code, out, errOut := shardctl("id", "decode", "3236157012032419020")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	want := map[string]string{
		"id": "3236157012032419020", "unix_ms": "1700000000000", "time": "2023-11-14T22:13:20Z",
		"shard": "1341", "seq": "204", "slot": "12", "counter": "3",
	}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for k, v := range want {
		if s := toString(got[k]); s != v {
			t.Errorf("%s = %s, want %s", k, s, v)
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("output is not one line: %q", out)
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case json.Number:
		return v.String()
	case string:
		return v
	}
	return "?"
}

func TestIDDecodeEpochAndSlotBits(t *testing.T) {
	// Twitter's epoch and no slots: the sequence is all counter.
	code, out, errOut := shardctl("id", "decode", "--epoch-ms", "1288834974657", "--slot-bits", "0", strconv.FormatInt(1000<<23|5<<10|77, 10))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		UnixMs  int64 `json:"unix_ms"`
		Shard   int   `json:"shard"`
		Slot    int   `json:"slot"`
		Counter int   `json:"counter"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.UnixMs != 1288834975657 || p.Shard != 5 || p.Slot != 0 || p.Counter != 77 {
		t.Fatalf("decoded %+v", p)
	}
}

func TestIDCompose(t *testing.T) {
	code, out, errOut := shardctl("id", "compose", "--unix-ms", "1700000000000", "--shard", "1341", "--seq", "204")
	if code != 0 || out != "3236157012032419020\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Round trip through decode.
	_, out, _ = shardctl("id", "decode", strings.TrimSpace(out))
	if !strings.Contains(out, `"shard":1341`) || !strings.Contains(out, `"unix_ms":1700000000000`) {
		t.Fatalf("decode of the composed ID: %s", out)
	}
	code, out, _ = shardctl("id", "compose", "--epoch-ms", "0", "--unix-ms", "1", "--shard", "0", "--seq", "0")
	if code != 0 || out != strconv.FormatInt(1<<23, 10)+"\n" {
		t.Fatalf("epoch 0 compose: exit %d, %q", code, out)
	}
}

func TestShardOf(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"shard-of", "31341"}, "1341"},
		{[]string{"shard-of", "--shards", "4096", "31341"}, strconv.Itoa(31341 % 4096)},
		{[]string{"shard-of", "0"}, "0"},
		{[]string{"shard-of", "--string", "alice"}, "183"},
		{[]string{"shard-of", "--string", "--shards", "10", "alice"}, "3"},
		{[]string{"shard-of", "--string", "--", "-5"}, "-"}, // a string key may look like anything
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := shardctl(tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if tt.want != "-" && out != tt.want+"\n" {
				t.Fatalf("stdout %q, want %q", out, tt.want)
			}
		})
	}
}

// TestBadArguments: every malformed command line gets one line on stderr,
// nothing on stdout, and exit status 2.
func TestBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // in the error message
	}{
		{"decode non-numeric", []string{"id", "decode", "abc"}, "not a decimal number"},
		{"decode empty", []string{"id", "decode", ""}, "not a decimal number"},
		{"decode hex", []string{"id", "decode", "0x10"}, "not a decimal number"},
		{"decode sign bit", []string{"id", "decode", "--", "-42"}, "sign bit"},
		{"decode overflow", []string{"id", "decode", "9223372036854775808"}, "63 bits"},
		{"decode no ID", []string{"id", "decode"}, "want 1 argument"},
		{"decode two IDs", []string{"id", "decode", "1", "2"}, "want 1 argument"},
		{"decode future epoch", []string{"id", "decode", "--epoch-ms", "99999999999999", "1"}, "future"},
		{"decode negative epoch", []string{"id", "decode", "--epoch-ms", "-1", "1"}, "before 1970"},
		{"decode bad epoch", []string{"id", "decode", "--epoch-ms", "soon", "1"}, "invalid argument"},
		{"decode slot bits too wide", []string{"id", "decode", "--slot-bits", "10", "1"}, "slot bits"},
		{"compose missing all", []string{"id", "compose"}, "--unix-ms, --shard, --seq"},
		{"compose missing seq", []string{"id", "compose", "--unix-ms", "1700000000000", "--shard", "1"}, "--seq"},
		{"compose shard too big", []string{"id", "compose", "--unix-ms", "1700000000000", "--shard", "8192", "--seq", "0"}, "shard 8192"},
		{"compose negative shard", []string{"id", "compose", "--unix-ms", "1700000000000", "--shard", "-1", "--seq", "0"}, "shard -1"},
		{"compose seq too big", []string{"id", "compose", "--unix-ms", "1700000000000", "--shard", "1", "--seq", "1024"}, "sequence 1024"},
		{"compose before epoch", []string{"id", "compose", "--unix-ms", "0", "--shard", "1", "--seq", "0"}, "outside"},
		{"compose sign bit", []string{"id", "compose", "--unix-ms", "9223372036854775807", "--shard", "1", "--seq", "0"}, "outside"},
		{"compose non-numeric", []string{"id", "compose", "--unix-ms", "now", "--shard", "1", "--seq", "0"}, "invalid argument"},
		{"compose extra arg", []string{"id", "compose", "5", "--unix-ms", "1700000000000", "--shard", "1", "--seq", "0"}, "want 0 argument"},
		{"shard-of negative", []string{"shard-of", "--", "-7"}, "negative shard key"},
		{"shard-of non-numeric", []string{"shard-of", "alice"}, "--string"},
		{"shard-of zero shards", []string{"shard-of", "--shards", "0", "5"}, "--shards 0: want a logical shard count from 1 to 8192"},
		{"shard-of no key", []string{"shard-of"}, "want 1 argument"},
		{"shard-of negative shards", []string{"shard-of", "--shards", "-5", "5"}, "--shards -5: want a logical shard count from 1 to 8192"},
		{"shard-of too many shards", []string{"shard-of", "--shards", "9000", "5"}, "--shards 9000: want a logical shard count from 1 to 8192"},
		{"shard-of string too many shards", []string{"shard-of", "--string", "--shards", "9000", "a"}, "--shards 9000"},
		{"shard-of bad shards", []string{"shard-of", "--shards", "many", "5"}, "invalid argument"},
		{"unknown flag", []string{"shard-of", "--bogus", "5"}, "unknown flag"},
		// init, migrate, move, rollback, verify, rebalance: flags checked
		// before the catalog is opened (postgres://x is never dialled).
		{"init zero shards", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--shards", "0"}, "--shards 0: want a logical shard count from 1 to 8192"},
		{"init negative shards", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--shards", "-5"}, "--shards -5"},
		{"init too many shards", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--shards", "9000"}, "--shards 9000"},
		{"init duplicate server name", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--server", "a=postgres://b"}, `server name "a" given twice`},
		{"init duplicate server DSN", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--server", "b=postgres://a"}, `the same DSN as server "a"`},
		{"init replica of unknown server", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--replica", "b=postgres://r"}, "--replica"},
		{"init no servers", []string{"init", "--catalog", "postgres://x"}, "no servers"},
		{"init bad slot bits", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--slot-bits", "11"}, "slot bits"},
		{"init future epoch", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--epoch-ms", "99999999999999"}, "future"},
		{"init sql not a dir", []string{"init", "--catalog", "postgres://x", "--server", "a=postgres://a", "--sql", "cli_test.go"}, "not a directory"},
		{"init argument", []string{"init", "extra", "--catalog", "postgres://x", "--server", "a=postgres://a"}, "want 0 argument"},
		{"migrate zero batch", []string{"migrate", "--catalog", "postgres://x", "--batch", "0"}, "--batch 0: want at least 1"},
		{"migrate duplicate server", []string{"migrate", "--catalog", "postgres://x", "--server", "a", "--server", "a"}, `--server: server "a" given twice`},
		{"migrate empty server", []string{"migrate", "--catalog", "postgres://x", "--server", ""}, "--server: empty server name"},
		{"move no shard", []string{"move", "--catalog", "postgres://x", "--to", "a"}, "--shard is required"},
		{"move bad shard", []string{"move", "--catalog", "postgres://x", "--shard", "x", "--to", "a"}, "want N, A-B"},
		{"move negative soak", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--to", "a", "--soak", "-5s"}, "--soak -5s: want a duration of zero or more"},
		{"move bad soak", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--to", "a", "--soak", "soon"}, "invalid argument"},
		{"move negative drain bound", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--to", "a", "--drain-bound", "-1s"}, "--drain-bound -1s: want a duration of zero or more"},
		{"move negative catch-up timeout", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--resume", "--catch-up-timeout", "-2m"}, "--catch-up-timeout -2m0s: want a duration of zero or more"},
		{"move soak with resume", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--resume", "--soak", "5s"}, "--soak go with --to"},
		{"move offline with complete", []string{"move", "--catalog", "postgres://x", "--shard", "1", "--complete", "--offline"}, "--offline and --soak go with --to"},
		{"move no mode", []string{"move", "--catalog", "postgres://x", "--shard", "1"}, "exactly one of"},
		{"move argument", []string{"move", "1", "--catalog", "postgres://x", "--shard", "1", "--to", "a"}, "want 0 argument"},
		{"rollback no shard", []string{"rollback", "--catalog", "postgres://x"}, "--shard is required"},
		{"verify reversed range", []string{"verify", "--catalog", "postgres://x", "--shard", "5-2"}, "A ≤ B"},
		{"rebalance negative max moves", []string{"rebalance", "--catalog", "postgres://x", "--max-moves", "-3"}, "--max-moves -3: want at least 0"},
		{"rebalance zero parallel", []string{"rebalance", "--catalog", "postgres://x", "--parallel", "0"}, "--parallel 0: want at least 1"},
		{"rebalance bad measure", []string{"rebalance", "--catalog", "postgres://x", "--by", "weight"}, "want bytes or rows"},
		{"rebalance empty server", []string{"rebalance", "--catalog", "postgres://x", "--servers", "a,,b"}, "--servers: empty server name"},
		{"rebalance duplicate server", []string{"rebalance", "--catalog", "postgres://x", "--servers", "a,b,a"}, `--servers: server "a" given twice`},
		{"rebalance no servers", []string{"rebalance", "--catalog", "postgres://x", "--servers", ""}, "--servers: empty server name"},
		{"status argument", []string{"status", "x", "--catalog", "postgres://x"}, "argument"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown id subcommand", []string{"id", "frobnicate"}, "unknown id subcommand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := shardctl(tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			if out != "" {
				t.Fatalf("stdout %q, want nothing", out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "shardctl: ") || !strings.Contains(errOut, tt.want) {
				t.Fatalf("stderr %q, want one line containing %q", errOut, tt.want)
			}
		})
	}
}

// FuzzParseID: parseID accepts exactly the decimal numbers that fit a
// positive int64, and explains every refusal as a usage error.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0", "3236157012032419020", "9223372036854775807", "9223372036854775808", "-1", "", "+5", "007", "1e9", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseID(s)
		n, perr := strconv.ParseInt(s, 10, 64)
		digits := isDigits(s)
		if err != nil {
			if !errors.Is(err, errUsage) || !errors.Is(err, errBadID) || strings.Contains(err.Error(), "\n") && !strings.Contains(s, "\n") {
				t.Fatalf("parseID(%q) error %v", s, err)
			}
			if digits && perr == nil {
				t.Fatalf("parseID(%q) refused a valid ID: %v", s, err)
			}
			return
		}
		if !digits || perr != nil || n != id || id < 0 {
			t.Fatalf("parseID(%q) = %d, accepted a non-ID", s, id)
		}
	})
}
