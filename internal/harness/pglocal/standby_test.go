package pglocal

import (
	"context"
	"errors"
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

// TestStandbySlotSync makes a standby that syncs failover slots: on
// PostgreSQL 17+ a logical slot made for failover on the primary appears
// on the standby ready for failover (synced, not temporary) and is there,
// usable, once the standby is promoted; on an older server the option is
// refused with ErrNoSlotSync.
func TestStandbySlotSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	set, err := Start(ctx, Options{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	primary := set.Clusters[0]
	v, err := primary.VersionNum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	standby, err := set.AddStandby(ctx, primary, StandbyOptions{SlotSync: true})
	if v < 170000 {
		if !errors.Is(err, ErrNoSlotSync) {
			t.Fatalf("slot sync on %d: %v, want ErrNoSlotSync", v, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := primary.psql(ctx, "SELECT pg_create_logical_replication_slot('moved', 'pgoutput', false, false, true)"); err != nil {
		t.Fatal(err)
	}
	ready := "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'moved' AND synced AND NOT temporary"
	for {
		// The sync worker persists its copy once the primary's slot has
		// moved past what the standby holds (its consumer confirming):
		// here a write and an advance stand for the consumer.
		if _, err := primary.psql(ctx, "SELECT txid_current(); SELECT pg_replication_slot_advance('moved', pg_current_wal_lsn())"); err != nil {
			t.Fatal(err)
		}
		standby.SyncSlots(ctx)
		got, err := standby.psql(ctx, ready)
		if err != nil {
			t.Fatal(err)
		}
		if got == "1" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the failover slot never became ready on the standby")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := standby.psql(ctx, "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('moved', NULL, NULL, 'proto_version', '1', 'publication_names', 'none')"); err != nil {
		t.Fatalf("the synced slot after the promotion: %v", err)
	}
}
