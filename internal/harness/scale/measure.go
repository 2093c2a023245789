package scale

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/harness/procmem"
)

// clockTicks is the unit of /proc/PID/stat's CPU times (USER_HZ: 100 on
// Linux everywhere that matters).
const clockTicks = 100

// pidFile reads the process ID in the first line of a PID file
// (postmaster.pid, pgbouncer.pid).
func pidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// procStat reads a process's parent and its CPU time in seconds (user and
// system) from /proc.
func procStat(pid int) (ppid int, cpu float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may hold spaces: the fields
	// after it start at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return ppid, (ut + st) / clockTicks, true
}

// treeCPU sums the CPU seconds of a process and its children (a
// postmaster and its backends). A backend that has exited no longer
// counts: the harness reads it where backends live long (behind a pooler,
// or the routers' pools).
func treeCPU(root int) float64 {
	if root == 0 {
		return 0
	}
	_, total, _ := procStat(root)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, cpu, ok := procStat(pid); ok && ppid == root {
			total += cpu
		}
	}
	return total
}

// reapedCPU reads the CPU seconds of a process's children that it has
// waited for (cutime and cstime): a postmaster's backends that exited.
func reapedCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[13], 64)
	st, _ := strconv.ParseFloat(f[14], 64)
	return (ut + st) / clockTicks
}

// clusterCPU is the CPU seconds a cluster has used so far: its postmaster,
// its live processes and those that exited (short-lived backends too).
func clusterCPU(dataDir string) float64 {
	pm := postmaster(dataDir)
	if pm == 0 {
		return 0
	}
	return treeCPU(pm) + reapedCPU(pm)
}

// postmaster returns the PID of a cluster's postmaster.
func postmaster(dataDir string) int { return pidFile(filepath.Join(dataDir, "postmaster.pid")) }

// readBackends reads the client backends of each server (DSNs that reach
// the servers themselves), the querying one excepted.
func readBackends(ctx context.Context, dsns []string) (procmem.Backends, error) {
	var b procmem.Backends
	for _, dsn := range dsns {
		sb, err := procmem.ReadBackends(ctx, dsn)
		if err != nil {
			return b, err
		}
		b = b.Add(sb)
	}
	return b, nil
}

// poolerClients counts the client connections a PgBouncer holds (SHOW
// POOLS on its admin console), or -1 if it cannot say.
func poolerClients(ctx context.Context, adminDSN string) int {
	cfg, err := pgx.ParseConfig(adminDSN)
	if err != nil {
		return -1
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW POOLS")
	if err != nil {
		return -1
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return -1
		}
		for i, fd := range rows.FieldDescriptions() {
			switch fd.Name {
			case "cl_active", "cl_waiting", "cl_active_cancel_req", "cl_waiting_cancel_req":
				total += int(toInt(vals[i]))
			}
		}
	}
	if rows.Err() != nil {
		return -1
	}
	return total
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
