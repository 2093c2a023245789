package rebalance

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestShardctlCommands runs the shardctl binary's move, verify, rollback,
// status and rebalance commands against a real catalog.
func TestShardctlCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the shardctl binary (the first make test stage runs it)")
	}
	bin := filepath.Join(t.TempDir(), "shardctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/shardctl").CombinedOutput(); err != nil {
		t.Fatalf("build shardctl: %v\n%s", err, out)
	}
	e := newEnv(t, 3, 2, 8)
	for s := range 8 {
		seedPhotos(t, e, s, 500*(s+1))
	}
	run := func(want int, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--catalog", e.catalogDSN)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("shardctl %v: exit %d, want %d\n%s", args, code, want, out)
		}
		return string(out)
	}
	expect := func(out string, subs ...string) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(out, s) {
				t.Errorf("output lacks %q:\n%s", s, out)
			}
		}
	}
	// expectRows checks verify's table for rows (the shared schema's
	// table names differ in width, so its columns' padding does too).
	expectRows := func(out string, rows ...string) {
		t.Helper()
		for _, r := range rows {
			if !regexp.MustCompile(`(?m)^` + strings.Join(strings.Fields(r), `\s+`) + `\s`).MatchString(out) {
				t.Errorf("output lacks the row %q:\n%s", r, out)
			}
		}
	}
	expect(run(0, "rebalance", "--dry-run"), "s2", "moves")
	expect(run(0, "move", "--shard", "0-1", "--to", "s2", "--quiet"), "shard 0: moved s0 → s2", "shard 1: moved s0 → s2")
	expect(run(0, "move", "--shard", "0", "--to", "s2"), "shard 0: already on s2")
	expect(run(0, "status"), "reversible")
	expect(run(0, "status", "--json"), `"moves": [`, `"state": "reversible"`, `"step": "reverse"`)
	expectRows(run(0, "verify", "--shard", "0,1"), "0 photos 500", "1 photos 1000")
	expect(run(0, "rollback", "--shard", "1"), "shard 1: back on s0")
	expect(run(0, "move", "--shard", "0", "--complete"), "shard 0: on s2, move 1 completed")
	expect(run(1, "verify", "--shard", "0"), "no unfinished move")
	expect(run(0, "rebalance", "--parallel", "2", "--complete", "--quiet"), "completed")
	expect(run(0, "status"), "moves: none unfinished")
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
