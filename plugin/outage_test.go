package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// TestServerDown stops the cluster of server b and checks what a caller
// sees: the typed error naming b and the shards, on reads and writes and
// across shards; server a's shards unaffected; a Partial read with a's
// rows and b's shards reported missing; and recovery without restart
// once b is back.
// ownClusterForB starts a cluster of its own for server b, so that a test
// can stop or freeze it without touching the other servers, and returns
// it with the envOpts.dsnOf that places b there.
func ownClusterForB(t *testing.T) (*pglocal.Cluster, func(string) string) {
	t.Helper()
	return ownClusterForBWith(t, pglocal.Options{})
}

// ownClusterForBWith is ownClusterForB with the cluster started by opts.
func ownClusterForBWith(t *testing.T, opts pglocal.Options) (*pglocal.Cluster, func(string) string) {
	t.Helper()
	set := pgtest.Set(t)
	c, err := set.Add(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	dsnB := pgtest.NewDatabase(t, len(set.Clusters)-1)
	return c, func(s string) string {
		if s == "b" {
			return dsnB
		}
		return ""
	}
}

func TestServerDown(t *testing.T) {
	ctx := context.Background()
	c, dsnOf := ownClusterForB(t)
	e := newEnv(t, envOpts{dsnOf: dsnOf})
	byServer := map[string][]int{} // shards by server
	for s := 0; s < e.shards; s++ {
		srv := e.serverOf(t, s)
		byServer[srv] = append(byServer[srv], s)
	}
	if len(byServer["a"]) == 0 || len(byServer["b"]) == 0 {
		t.Fatalf("shards by server %v: want both servers used", byServer)
	}
	var onA []int64 // IDs of the rows on server a
	for u := int64(1); u <= int64(2*e.shards); u++ {
		p := Photo{UserID: u, Caption: "x"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		if e.serverOf(t, e.shardOf(u)) == "a" {
			onA = append(onA, p.ID)
		}
	}
	userOn := func(server string) int64 { return int64(byServer[server][0] + e.shards) } // a user of the server's first shard
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}

	wantDown := func(what string, err error, shards []int) {
		t.Helper()
		var se *ServerError
		if !errors.Is(err, ErrServerUnavailable) || !errors.As(err, &se) {
			t.Fatalf("%s: got %v, want a *ServerError matching ErrServerUnavailable", what, err)
		}
		if se.Server != "b" || !slices.Equal(se.Shards, shards) || se.Table != "photos" {
			t.Fatalf("%s: ServerError names server %q shards %v table %q, want b %v photos", what, se.Server, se.Shards, se.Table, shards)
		}
	}
	ub := userOn("b")
	var p Photo
	wantDown("read", e.db.Where("user_id = ?", ub).Take(&p).Error, []int{e.shardOf(ub)})
	// Known down now: fails at once with the same type.
	wantDown("read again", e.db.Where("user_id = ?", ub).Take(&p).Error, []int{e.shardOf(ub)})
	wantDown("write", e.db.Create(&Photo{UserID: ub, Caption: "y"}).Error, []int{e.shardOf(ub)})

	// Server a's shards: reads and writes as usual.
	ua := userOn("a")
	var onAOne Photo
	if err := e.db.Where("user_id = ?", ua).Take(&onAOne).Error; err != nil {
		t.Fatalf("read on a: %v", err)
	}
	written := Photo{UserID: ua, Caption: "z"}
	if err := e.db.Create(&written).Error; err != nil {
		t.Fatalf("write on a: %v", err)
	}
	onA = append(onA, written.ID)

	// Across shards: the default fails, naming b and its shards.
	var all []Photo
	wantDown("read across shards", e.db.Clauses(AllShards()).Find(&all).Error, byServer["b"])
	var n int64
	wantDown("count across shards", e.db.Model(&Photo{}).Clauses(AllShards()).Count(&n).Error, byServer["b"])

	// Partial: a's rows, b's shards reported.
	var pr PartialResult
	all = nil
	if err := e.db.Clauses(AllShards(), Partial(&pr)).Order("id").Find(&all).Error; err != nil {
		t.Fatalf("partial read: %v", err)
	}
	var got []int64
	for _, p := range all {
		got = append(got, p.ID)
	}
	slices.Sort(onA)
	if !slices.Equal(got, onA) {
		t.Fatalf("partial read: got %d rows %v, want server a's %d rows %v", len(got), got, len(onA), onA)
	}
	if pr.Complete() || !slices.Equal(pr.Missing, byServer["b"]) || len(pr.Errors) != 1 || pr.Errors[0].Server != "b" {
		t.Fatalf("partial result: missing %v errors %v, want b's shards %v", pr.Missing, pr.Errors, byServer["b"])
	}
	if err := e.db.Model(&Photo{}).Clauses(AllShards(), Partial(&pr)).Count(&n).Error; err != nil || n != int64(len(onA)) || !slices.Equal(pr.Missing, byServer["b"]) {
		t.Fatalf("partial count: %d, %v, missing %v; want %d rows of a", n, err, pr.Missing, len(onA))
	}
	// Partial is for reads.
	if err := e.db.Clauses(AllShards(), Partial(&pr)).Where("caption = ?", "none").Delete(&Photo{}).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("partial delete: %v, want ErrUnroutableSQL", err)
	}

	// Back up: the plugin finds out by itself (a statement tries the
	// server again once ServerRetry has passed).
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Until(t, 60*time.Second, func() error {
		var back Photo
		err := e.db.Where("user_id = ?", ub).Take(&back).Error
		if err != nil && !errors.Is(err, ErrServerUnavailable) {
			t.Fatalf("after restart: %v", err)
		}
		return err
	})
	pr = PartialResult{}
	if err := e.db.Clauses(AllShards(), Partial(&pr)).Find(&all).Error; err != nil || !pr.Complete() || len(all) != 2*e.shards+1 {
		t.Fatalf("after restart: %d rows, %v, missing %v; want %d", len(all), err, pr.Missing, 2*e.shards+1)
	}
}

// signalCluster sends sig to a cluster's postmaster and every process it
// started (SIGSTOP freezes the server as a hung machine would: the
// kernel still accepts connections, nothing answers).
func signalCluster(t *testing.T, dir string, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{pid}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range procs {
		st, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after ')'.
		s := string(st)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(strings.Fields(s)[0])
			pids = append(pids, child)
		}
	}
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil && sig != syscall.SIGCONT {
			t.Fatalf("signal %d: %v", p, err)
		}
	}
}

// TestServerFrozen freezes server b (SIGSTOP on its postmaster and
// backends): a statement on b's shards fails with a *ServerError once
// StatementTimeout (plus its grace) has passed, instead of hanging; a's
// shards answer throughout; after the thaw, b answers again without
// restart.
func TestServerFrozen(t *testing.T) {
	c, dsnOf := ownClusterForB(t)
	const timeout = 2 * time.Second
	e := newEnv(t, envOpts{
		dsnOf: dsnOf,
		cfg:   func(c *Config) { c.StatementTimeout = timeout },
	})
	ua, ub := e.photoPerShard(t)
	signalCluster(t, c.Dir, syscall.SIGSTOP)
	thawed := false
	thaw := func() {
		if !thawed {
			signalCluster(t, c.Dir, syscall.SIGCONT)
			thawed = true
		}
	}
	t.Cleanup(thaw)

	start := time.Now()
	var p Photo
	err := e.db.Where("user_id = ?", ub).Take(&p).Error
	took := time.Since(start)
	wantUnavailable(t, err, "b", "read on frozen b")
	// Bounded: the deadline is timeout plus a second; the bound here
	// leaves a loaded machine ample room and still fails a hang.
	if took > timeout+deadlineGrace+30*time.Second {
		t.Fatalf("read on frozen b took %v", took)
	}
	t.Logf("read on frozen b failed after %v: %v", took.Round(time.Millisecond), err)
	var pa Photo
	if err := e.db.Where("user_id = ?", ua).Take(&pa).Error; err != nil {
		t.Fatalf("read on a while b is frozen: %v", err)
	}
	var pr PartialResult
	var all []Photo
	if err := e.db.Clauses(AllShards(), Partial(&pr)).Find(&all).Error; err != nil || pr.Complete() {
		t.Fatalf("partial read while b is frozen: %v, missing %v", err, pr.Missing)
	}

	thaw()
	testkit.Until(t, 60*time.Second, func() error {
		var back Photo
		err := e.db.Where("user_id = ?", ub).Take(&back).Error
		if err != nil && !errors.Is(err, ErrServerUnavailable) {
			t.Fatalf("after the thaw: %v", err)
		}
		return err
	})
}

// photoPerShard creates a photo in every shard, user u in shard u, and
// returns a user on server a and one on server b.
func (e *env) photoPerShard(t *testing.T) (ua, ub int64) {
	t.Helper()
	for u := int64(1); u <= int64(e.shards); u++ {
		if err := e.db.Create(&Photo{UserID: u, Caption: "x"}).Error; err != nil {
			t.Fatal(err)
		}
		if e.serverOf(t, e.shardOf(u)) == "a" {
			ua = u
		} else {
			ub = u
		}
	}
	return ua, ub
}

// wantUnavailable fails the test unless err is a *ServerError for server
// that is ErrServerUnavailable; what names the statement.
func wantUnavailable(t testing.TB, err error, server, what string) {
	t.Helper()
	var se *ServerError
	if !errors.As(err, &se) || se.Server != server || !errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("%s: %v, want a *ServerError for %s", what, err, server)
	}
}
