// Package procmem reads a process's private memory from Linux's /proc, and
// that of a local Postgres server's client backends: what the memory
// figures of the demo, the scale harness and the benchmarks report.
package procmem

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RssAnonMB returns a process's private resident memory in MB (RssAnon in
// /proc/PID/status: its own heap and caches, shared memory such as
// Postgres's shared buffers not included); ok is false when the process is
// gone or the line cannot be read (not Linux).
func RssAnonMB(pid int) (mb float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	return parseRssAnon(string(b))
}

// parseRssAnon reads the RssAnon line of a /proc/PID/status text.
func parseRssAnon(status string) (float64, bool) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

// Backends is the private memory of a server's client backends at one
// moment.
type Backends struct {
	Count          int     // client backends whose memory was read
	TotalMB, MaxMB float64 // their private memory in all, and the largest's
	// MaxQuery is the start of the largest backend's current or last
	// statement: whose backend it is (the service's pool, a mover's copy).
	MaxQuery string
}

// Add counts o's backends with b's.
func (b Backends) Add(o Backends) Backends {
	sum := Backends{Count: b.Count + o.Count, TotalMB: b.TotalMB + o.TotalMB, MaxMB: b.MaxMB, MaxQuery: b.MaxQuery}
	if o.MaxMB > b.MaxMB {
		sum.MaxMB, sum.MaxQuery = o.MaxMB, o.MaxQuery
	}
	return sum
}

// ReadBackends reads the client backends of the server dsn reaches (the
// server itself, not a pooler in front of it, and on this machine), the
// querying one excepted; a backend gone before its memory is read is not
// counted.
func ReadBackends(ctx context.Context, dsn string) (Backends, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return Backends{}, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid, left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 60) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return Backends{}, err
	}
	type backend struct {
		PID   int
		Query string
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[backend])
	if err != nil {
		return Backends{}, err
	}
	var b Backends
	for _, be := range all {
		if mb, ok := RssAnonMB(be.PID); ok {
			b.Count++
			b.TotalMB += mb
			if mb > b.MaxMB {
				b.MaxMB, b.MaxQuery = mb, be.Query
			}
		}
	}
	return b, nil
}
