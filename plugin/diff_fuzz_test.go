package plugin

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// A fuzz worker is a process of its own that starts its own Postgres
// clusters (through pgtest). Two things keep them from outliving a run.

// fuzzWorker reports whether this process is a fuzzing worker.
func fuzzWorker() bool {
	fl := flag.Lookup("test.fuzzworker")
	return fl != nil && fl.Value.String() == "true"
}

// prepareFuzzWorker readies a fuzz worker to start clusters.
//
// The worker's pipes to its coordinator are inherited as descriptors 3
// and 4 without close-on-exec: the Postgres servers the worker starts
// would inherit them, and the coordinator, which waits for the pipe to
// close, would never return. They are marked close-on-exec.
//
// The coordinator stops a worker with SIGINT and SIGKILL a second later,
// before pgtest.Main stops the clusters; a watcher process stops them
// (and removes their directory) once the worker is gone.
func prepareFuzzWorker(t testing.TB) {
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	set := pgtest.Set(t)
	bin, err := pglocal.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, c := range set.Clusters {
		dirs = append(dirs, strconv.Quote(c.Dir))
	}
	if len(dirs) == 0 {
		return
	}
	root := filepath.Dir(set.Clusters[0].Dir)
	if !strings.HasPrefix(filepath.Base(root), "shardkit-pg-") {
		t.Fatalf("unexpected cluster directory %s", root)
	}
	script := fmt.Sprintf(`while [ -d /proc/%d ]; do sleep 1; done; for d in %s; do %s -D "$d" -m immediate -w stop; done; rm -rf %s`,
		os.Getpid(), strings.Join(dirs, " "), strconv.Quote(filepath.Join(bin, "pg_ctl")), strconv.Quote(root))
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the cluster watcher: %v", err)
	}
	go func() { _ = cmd.Wait() }()
}
