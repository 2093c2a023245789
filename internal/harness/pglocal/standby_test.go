package pglocal

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStandbyFailover makes a synchronous standby, kills the primary,
// promotes the standby and restarts the old primary as it was: the
// standby has the commit the primary acknowledged, takes writes on a new
// timeline, and the old primary comes back writable on the old one.
func TestStandbyFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := Start(ctx, Options{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	primary := set.Clusters[0]
	standby, err := set.AddStandby(ctx, primary, StandbyOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := BinDir()
	psql := func(c *Cluster, sql string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-XAtqc", sql, c.DSN("postgres")).CombinedOutput()
		if err != nil {
			t.Fatalf("psql on port %d: %s: %v: %s", c.Port, sql, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := psql(primary, "SELECT sync_state FROM pg_stat_replication"); got != "sync" {
		t.Fatalf("standby's sync_state = %q, want sync", got)
	}
	psql(primary, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
	tl := func(c *Cluster) string { return psql(c, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)") }
	oldTL := tl(primary)
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if got := psql(standby, "INSERT INTO t VALUES (2); SELECT count(*) FROM t"); got != "2" {
		t.Fatalf("rows on the promoted standby = %q, want 2", got)
	}
	newTL := tl(standby)
	if newTL <= oldTL {
		t.Fatalf("timeline after promotion %s, before %s: want a newer one", newTL, oldTL)
	}
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tl(primary); got != oldTL {
		t.Fatalf("old primary restarted on timeline %s, want %s", got, oldTL)
	}
}
