package store

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/router"
)

// countRowsSQL counts every row of every table in the given schemas, one
// exact count per table, in one round trip: format('%I') quotes the names
// and query_to_xml runs each count. Schemas and tables are bind parameters.
const countRowsSQL = `
SELECT n.nspname, c.relname,
       (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I.%I', n.nspname, c.relname), false, true, '')))[1]::text::bigint
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname = ANY($1) AND c.relname = ANY($2)
ORDER BY 1, 2`

// Tables are the example's per-shard tables.
var Tables = []string{"users", "photos", "likes", "follows", "followers"}

// ServerRows is the row count of one server: rows of each table in the
// schemas the shard map places there.
type ServerRows struct {
	Server string           `json:"server"`
	Shards int              `json:"shards"`
	Tables map[string]int64 `json:"tables"`
	Total  int64            `json:"total"`
}

// Stats counts rows on the shard servers directly (not through GORM), for
// the admin page and the demo's summary. It keeps one small pool per server.
type Stats struct {
	mu    sync.Mutex
	pools map[string]*pgxpool.Pool // by DSN
}

// NewStats returns a Stats and its cleanup.
func NewStats() (*Stats, func()) {
	s := &Stats{pools: map[string]*pgxpool.Pool{}}
	return s, s.Close
}

// Close closes the pools.
func (s *Stats) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, p := range s.pools {
		p.Close()
		delete(s.pools, k)
	}
}

func (s *Stats) pool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pools[dsn]; ok {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, pgdsn.Scrub(err)
	}
	cfg.MaxConns = 2
	// The application's DSN may name a pooler in transaction mode, where
	// a statement prepared on one server connection may be missing on the
	// next (26000 through PgBouncer in make demo-pooled). A count a few
	// times a minute gains nothing from preparing: the simple protocol
	// carries its arrays as literals.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	// A count opens every table of the server, and the backend keeps their
	// catalog entries until it exits: 52 MB for 667 shards of five tables,
	// the largest backend of the demo's soak while it stayed in the pool.
	// The admin page counts rarely: let idle connections go.
	cfg.MaxConnIdleTime = 10 * time.Second
	cfg.HealthCheckPeriod = 10 * time.Second
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.pools[dsn] = p
	return p, nil
}

// Rows counts, on every server of snap, the rows in the schemas snap places
// on it. Servers are counted in parallel; the result is sorted by name.
func (s *Stats) Rows(ctx context.Context, snap *router.Snapshot) ([]ServerRows, error) {
	servers := snap.Servers()
	out := make([]ServerRows, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = s.serverRows(ctx, snap, srv)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out, nil
}

func (s *Stats) serverRows(ctx context.Context, snap *router.Snapshot, srv router.Server) (ServerRows, error) {
	r := ServerRows{Server: srv.Name, Tables: map[string]int64{}}
	shards := snap.ShardsOn(srv.Name)
	r.Shards = len(shards)
	if len(shards) == 0 {
		return r, nil
	}
	schemas := make([]string, len(shards))
	for i, sh := range shards {
		schemas[i] = router.SchemaName(sh)
	}
	p, err := s.pool(ctx, srv.DSN) // the application's DSN: the service holds no other
	if err != nil {
		return r, fmt.Errorf("photos: count rows on %s: %w", srv.Name, err)
	}
	rows, err := p.Query(ctx, countRowsSQL, schemas, Tables)
	if err != nil {
		return r, fmt.Errorf("photos: count rows on %s: %w", srv.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var schema, table string
		var n int64
		if err := rows.Scan(&schema, &table, &n); err != nil {
			return r, err
		}
		r.Tables[table] += n
		r.Total += n
	}
	return r, rows.Err()
}
