package pglocal

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartTwoClusters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set, err := Start(ctx, Options{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Stop()
	if set.Clusters[0].Port == set.Clusters[1].Port {
		t.Fatalf("both clusters on port %d", set.Clusters[0].Port)
	}
	bin, _ := BinDir()
	for _, c := range set.Clusters {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-XAtc", "SHOW wal_level", c.DSN("postgres")).CombinedOutput()
		if err != nil {
			t.Fatalf("psql: %v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "logical" {
			t.Fatalf("wal_level = %q, want logical", got)
		}
	}
	c := set.Clusters[0]
	// The servers may keep a shard server's thousands of relation files
	// open: the setting, and the postmaster's own limit that bounds it.
	if want := serverFiles(); want > 0 {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-XAtc", "SHOW max_files_per_process", c.DSN("postgres")).CombinedOutput()
		if err != nil {
			t.Fatalf("psql: %v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != strconv.Itoa(want) {
			t.Fatalf("max_files_per_process = %q, want %d", got, want)
		}
		pid, err := os.ReadFile(filepath.Join(c.Dir, "postmaster.pid"))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(pid), "\n")
		limits, err := os.ReadFile("/proc/" + strings.TrimSpace(first) + "/limits")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(limits), "\n") {
			if f := strings.Fields(line); len(f) >= 5 && strings.HasPrefix(line, "Max open files") {
				if soft, _ := strconv.Atoi(f[3]); soft < want {
					t.Fatalf("the server's soft limit on open files is %d, below max_files_per_process %d", soft, want)
				}
			}
		}
	}
	ready := func() bool {
		return exec.Command(filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port)).Run() == nil
	}
	// Stop and Restart keep the port: clients reconnect to the same DSN.
	if err := c.Stop(); err != nil || ready() {
		t.Fatalf("Stop: %v; still ready: %v", err, ready())
	}
	if err := c.Restart(ctx); err != nil || !ready() {
		t.Fatalf("Restart: %v; ready: %v", err, ready())
	}
	set.Stop()
	if err := exec.Command(filepath.Join(bin, "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port)).Run(); err == nil {
		t.Fatal("cluster still accepts connections after Stop")
	}
}
