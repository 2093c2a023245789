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

// TestStartVersions starts a cluster of each server version the suite runs
// on (SHARDKIT_PG_VERSIONS, default "17 18", built by `make postgres`) and
// checks that the server answering is that version, not another one found
// first. A version named explicitly must be there; of the defaults, one that
// is neither installed nor built is skipped, saying so.
func TestStartVersions(t *testing.T) {
	list, explicit := os.LookupEnv("SHARDKIT_PG_VERSIONS")
	if !explicit {
		list = "17 18"
	}
	if list == "none" {
		t.Skip("SHARDKIT_PG_VERSIONS=none")
	}
	for _, f := range strings.Fields(list) {
		major, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("SHARDKIT_PG_VERSIONS lists %q, want major versions such as 17", f)
		}
		t.Run(f, func(t *testing.T) {
			bin, err := BinDirOf(major)
			if err != nil {
				if explicit {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			set, err := Start(ctx, Options{Version: major})
			if err != nil {
				t.Fatal(err)
			}
			defer set.Stop()
			out, err := exec.CommandContext(ctx, filepath.Join(bin, "psql"), "-XAtc", "SHOW server_version_num", set.Clusters[0].DSN("postgres")).CombinedOutput()
			if err != nil {
				t.Fatalf("psql: %v: %s", err, out)
			}
			num, _ := strconv.Atoi(strings.TrimSpace(string(out)))
			if num/10000 != major {
				t.Fatalf("server_version_num = %d from %s, want version %d", num, bin, major)
			}
		})
	}
}
