package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/procmem"
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
}

// backendQuery lists the client backends of a server, the querying one
// excepted.
const backendQuery = `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`

// readBackends reads the client backends of each server (name → a DSN that
// reaches the server itself, not a pooler).
func readBackends(ctx context.Context, servers map[string]string) (backends, error) {
	var b backends
	for name, dsn := range servers {
		pids, err := backendPIDs(ctx, dsn)
		if err != nil {
			return b, fmt.Errorf("server %s: %w", name, err)
		}
		for _, pid := range pids {
			mb, ok := procmem.RssAnonMB(pid)
			if !ok { // gone, or not on this machine
				continue
			}
			b.count++
			b.totalMB += mb
			if mb > b.maxMB {
				b.maxMB, b.maxServer = mb, name
			}
		}
	}
	return b, nil
}

func backendPIDs(ctx context.Context, dsn string) ([]int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, backendQuery)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

func (b backends) String() string {
	if b.count == 0 {
		return "server backends not on this machine"
	}
	return fmt.Sprintf("%d server backends, private memory %.0f MB in all, the largest %.1f MB (%s)",
		b.count, b.totalMB, b.maxMB, b.maxServer)
}

// backendLimitMB is the most private memory a server backend may hold at
// the end of the load (a soak fails past it): a backend that has opened
// every shard table of its server holds about half of it.
const backendLimitMB = 64
