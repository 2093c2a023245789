package main

import (
	"context"
	"fmt"

	"github.com/shardkit/shardkit/internal/harness/procmem"
)

// backends is the memory of the shard servers' client backends at one
// moment: the private memory (RssAnon: the backend's own heap, its caches
// of relations and plans; shared buffers are not in it) of each backend
// that serves a client, read from /proc. It is only known for servers on
// this machine (the demo's local clusters).
type backends struct {
	count     int
	maxMB     float64 // the largest backend's private memory
	totalMB   float64
	maxServer string // the server of the largest backend
	maxQuery  string // the start of its current or last statement
}

// readBackends reads the client backends of each server (name → a DSN that
// reaches the server itself, not a pooler).
func readBackends(ctx context.Context, servers map[string]string) (backends, error) {
	var b backends
	for name, dsn := range servers {
		sb, err := procmem.ReadBackends(ctx, dsn)
		if err != nil {
			return b, fmt.Errorf("server %s: %w", name, err)
		}
		b.count += sb.Count
		b.totalMB += sb.TotalMB
		if sb.MaxMB > b.maxMB {
			b.maxMB, b.maxServer, b.maxQuery = sb.MaxMB, name, sb.MaxQuery
		}
	}
	return b, nil
}

func (b backends) String() string {
	if b.count == 0 {
		return "server backends not on this machine"
	}
	return fmt.Sprintf("%d server backends, private memory %.0f MB in all, the largest %.1f MB (%s, last ran %q)",
		b.count, b.totalMB, b.maxMB, b.maxServer, b.maxQuery)
}

// backendLimitMB is the most private memory a server backend may hold at
// the end of the load (a soak fails past it): a backend that has opened
// every shard table of its server holds about half of it.
const backendLimitMB = 64
