package main

import (
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestServerSwitchoverRefuses runs `server switchover` where it cannot
// work: without --to, and on a server whose DSN names one host without
// target_session_attrs=read-write (its connections could not follow the
// promotion). Each exits non-zero with what to do, and leaves the
// server's shards unfenced; --release then finds nothing to release.
func TestServerSwitchoverRefuses(t *testing.T) {
	cat := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	if code, _, errOut := shardctl("init", "--catalog", cat, "--server", "a="+a, "--server", "b="+b, "--shards", "4", "--quiet"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, cat)
	if code, _, errOut := shardctl("server", "switchover", "a"); code == 0 || !strings.Contains(errOut, "--to") {
		t.Fatalf("switchover without --to: exit %d: %s", code, errOut)
	}
	code, out, errOut := shardctl("server", "switchover", "a", "--to", "127.0.0.1")
	if code == 0 || !strings.Contains(errOut, "target_session_attrs=read-write") || !strings.Contains(errOut, "undone") {
		t.Fatalf("switchover of a one-host server: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := shardctl("server", "switchover", "a", "--release"); code != 0 || !strings.Contains(out, "0 shards released") {
		t.Fatalf("switchover --release: exit %d: %s%s", code, out, errOut)
	}
}
