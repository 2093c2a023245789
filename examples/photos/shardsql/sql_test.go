package shardsql

import (
	"strings"
	"testing"

	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/plugin"
)

// The files must be what migrations.Provision accepts: versioned names,
// unqualified tables, every table of version 1 keyed by a 64-bit ID from
// next_id(); version 2 adds the username and its lookup table, version 3
// the followers table.
func TestFilesAreValidMigrations(t *testing.T) {
	vs, err := migrations.ReadVersions(FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].Number != 1 || vs[0].Indexes == "" || vs[1].Number != 2 || vs[2].Number != 3 || vs[2].Indexes == "" {
		t.Fatalf("versions %+v, want version 1 with an indexes part, version 2, and version 3 with an indexes part", vs)
	}
	if !strings.Contains(vs[2].Tables, "CREATE TABLE followers (\n    id ") || !strings.Contains(vs[2].Tables, "bigint PRIMARY KEY DEFAULT next_id()") {
		t.Error("version 3 lacks the followers table keyed by next_id()")
	}
	if !strings.Contains(vs[1].Tables, "CREATE TABLE "+plugin.LookupTable("users", "username")+" (") {
		t.Error("version 2 lacks the username lookup table")
	}
	for _, table := range []string{"users", "photos", "likes", "follows"} {
		if !strings.Contains(vs[0].Tables, "CREATE TABLE "+table+" (\n    id ") {
			t.Errorf("table %s missing or not keyed by id first", table)
		}
	}
	if n := strings.Count(vs[0].Tables, "bigint PRIMARY KEY DEFAULT next_id()"); n != 4 {
		t.Errorf("%d tables take their IDs from next_id(), want 4", n)
	}
	if strings.Contains(withoutComments(vs[0].Tables+vs[0].Indexes+vs[1].Tables+vs[2].Tables+vs[2].Indexes), "shard_") {
		t.Error("per-shard SQL names a shard schema; names must be unqualified")
	}
}

func withoutComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if code, _, _ := strings.Cut(line, "--"); strings.TrimSpace(code) != "" {
			b.WriteString(code + "\n")
		}
	}
	return b.String()
}
