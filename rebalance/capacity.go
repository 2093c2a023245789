package rebalance

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/pgdsn"
)

// serverLoad is what a server allows and uses of what a move needs.
type serverLoad struct {
	walLevel                   string
	maxSlots, slots            int64
	maxSenders, senders        int64
	maxLogicalWorkers, logical int64
	maxWorkers, workers        int64
}

// sqlServerLoad reads a server's settings and use. Replication slots are
// per cluster (every database's count); background workers are the
// processes of pg_stat_activity that are not PostgreSQL's own auxiliary
// processes, client backends or WAL senders.
const sqlServerLoad = `SELECT current_setting('wal_level'),
       current_setting('max_replication_slots')::bigint, (SELECT count(*) FROM pg_replication_slots),
       current_setting('max_wal_senders')::bigint,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'),
       current_setting('max_logical_replication_workers')::bigint,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication worker'),
       current_setting('max_worker_processes')::bigint,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type NOT IN ('client backend', 'walsender', 'walreceiver',
           'autovacuum launcher', 'autovacuum worker', 'background writer', 'checkpointer', 'walwriter', 'startup',
           'archiver', 'standalone backend'))`

func readLoad(ctx context.Context, p *pgxpool.Pool) (serverLoad, error) {
	var l serverLoad
	err := p.QueryRow(ctx, sqlServerLoad).Scan(&l.walLevel, &l.maxSlots, &l.slots, &l.maxSenders, &l.senders,
		&l.maxLogicalWorkers, &l.logical, &l.maxWorkers, &l.workers)
	if err != nil {
		return l, fmt.Errorf("read replication settings: %w", err)
	}
	return l, nil
}

// sameCluster reports whether two DSNs name the same PostgreSQL server
// (a host and port in common, of every host each names), whose slots and
// workers the two sides then share.
func sameCluster(a, b string) bool {
	ca, err := pgconn.ParseConfig(a)
	if err != nil {
		return false
	}
	cb, err := pgconn.ParseConfig(b)
	if err != nil {
		return false
	}
	return pgdsn.SharesHost(ca, cb)
}

// capacityChecks compares what an online move needs with what each side
// has free. The source holds the forward slot and serves one WAL sender for
// it: first the replication connection that creates the slot and holds
// its exported snapshot while the copy's transactions import it, then,
// once that connection is closed and the rows and indexes are in, the
// subscription's; after the cutover it runs the reverse subscription's
// apply worker. The target runs the forward apply worker (no table-copy
// workers: the subscription copies nothing), and holds the reverse slot
// and serves its WAL sender. On one cluster the two add up.
func capacityChecks(srcName, tgtName string, src, tgt serverLoad, shared bool) []Check {
	type need struct{ slots, senders, logical, workers int64 }
	srcNeed := need{slots: 1, senders: 1, logical: 1, workers: 1}
	tgtNeed := need{slots: 1, senders: 1, logical: 1, workers: 1}
	sides := []struct {
		name string
		l    serverLoad
		n    need
	}{{srcName, src, srcNeed}, {tgtName, tgt, tgtNeed}}
	if shared {
		sum := need{srcNeed.slots + tgtNeed.slots, srcNeed.senders + tgtNeed.senders,
			srcNeed.logical + tgtNeed.logical, srcNeed.workers + tgtNeed.workers}
		sides = sides[:1]
		sides[0].n = sum
		sides[0].name = srcName + " (and " + tgtName + ", same cluster)"
	}
	var out []Check
	for _, s := range sides {
		var failed []*checkError
		for _, r := range []struct {
			setting         string
			limit, use, req int64
		}{
			{"max_replication_slots", s.l.maxSlots, s.l.slots, s.n.slots},
			{"max_wal_senders", s.l.maxSenders, s.l.senders, s.n.senders},
			{"max_logical_replication_workers", s.l.maxLogicalWorkers, s.l.logical, s.n.logical},
			{"max_worker_processes", s.l.maxWorkers, s.l.workers, s.n.workers},
		} {
			if free := r.limit - r.use; free < r.req {
				failed = append(failed, &checkError{Check: checkCapacity, Server: s.name, Object: r.setting,
					Detail: fmt.Sprintf("%d of %d in use, the move needs %d free", r.use, r.limit, r.req), Err: errReplicationCapacity})
			}
		}
		if len(failed) == 0 {
			out = append(out, Check{Name: checkCapacity, Server: s.name, Detail: fmt.Sprintf(
				"slots %d/%d, WAL senders %d/%d, logical workers %d/%d, worker processes %d/%d in use; needs %d, %d, %d, %d free",
				s.l.slots, s.l.maxSlots, s.l.senders, s.l.maxSenders, s.l.logical, s.l.maxLogicalWorkers, s.l.workers, s.l.maxWorkers,
				s.n.slots, s.n.senders, s.n.logical, s.n.workers)})
		}
		for _, f := range failed {
			out = append(out, Check{Name: checkCapacity, Server: s.name, Detail: f.Detail, Err: f})
		}
	}
	return out
}
