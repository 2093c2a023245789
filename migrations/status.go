package migrations

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// Report is the state of a shardkit deployment, as Status sees it.
type Report struct {
	MapVersion int64              `json:"map_version"`
	Shards     int                `json:"shards"`
	Layout     idgen.Layout       `json:"layout"`
	Servers    []ServerStatus     `json:"servers"`
	NotActive  []router.Placement `json:"not_active"` // shards moving or fenced
}

// ServerStatus is one server's line of a Report. Rows and Bytes cover the
// tables of the shard schemas the map places on the server; Rows is the
// planner's estimate (max of pg_class.reltuples and n_live_tup).
type ServerStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// DSN and AdminDSN are the server's DSNs with their passwords
	// replaced by xxxxx; AdminDSN is "" when the server has one DSN.
	DSN      string `json:"dsn"`
	AdminDSN string `json:"admin_dsn,omitempty"`
	Shards   int    `json:"shards"`
	Ranges   string `json:"ranges"` // the shards as ranges, e.g. "0-499,1000"
	Rows     int64  `json:"rows"`
	Bytes    int64  `json:"bytes"`
	Error    string `json:"error,omitempty"` // set when the server could not be read
}

// shardSize is the estimated size of a shard schema's tables.
type shardSize struct {
	Rows  int64 `json:"rows"`  // max(pg_class.reltuples, pg_stat n_live_tup), summed
	Bytes int64 `json:"bytes"` // pg_total_relation_size: heap, indexes and TOAST
}

// sqlShardSizes sums estimates per shard schema. Exact counts (count(*))
// over 2000 schemas would read every table; the estimates are free, and
// current to the last ANALYZE or statistics flush.
const sqlShardSizes = `SELECT n.nspname,
       coalesce(sum(greatest(c.reltuples, coalesce(s.n_live_tup, 0), 0)), 0)::bigint,
       coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind = 'r' AND n.nspname = ANY($1)
GROUP BY n.nspname`

// shardSizes returns the estimated size of each given shard's schema on
// one server; shards without a schema there are absent from the result.
func shardSizes(ctx context.Context, db shardschema.DB, shards []int) (map[int]shardSize, error) {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = router.SchemaName(s)
	}
	out := map[int]shardSize{}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlShardSizes, names)
		if err != nil {
			return err
		}
		var schema string
		var sz shardSize
		_, err = pgx.ForEachRow(rows, []any{&schema, &sz.Rows, &sz.Bytes}, func() error {
			shard, err := router.ParseSchemaName(schema)
			if err != nil {
				return err
			}
			out[shard] = sz
			return nil
		})
		return err
	})
	return out, err
}

// Status reads the shard map and asks every server, in parallel, for the
// size of its shards. A server that cannot be read gets an Error in its
// line instead of failing the report; the error is only for the catalog.
func Status(ctx context.Context, cat *catalog.Catalog) (*Report, error) {
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{MapVersion: snap.Version, Shards: snap.Shards, Layout: snap.Layout, NotActive: []router.Placement{}}
	for _, p := range snap.Placements() {
		if p.State != router.StateActive {
			r.NotActive = append(r.NotActive, p)
		}
	}
	servers := snap.Servers()
	r.Servers = make([]ServerStatus, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		shards := snap.ShardsOn(srv.Name)
		st := &r.Servers[i]
		*st = ServerStatus{Name: srv.Name, State: srv.State, DSN: pgdsn.Redact(srv.DSN), Shards: len(shards), Ranges: shardRanges(shards)}
		if srv.AdminDSN != "" {
			st.AdminDSN = pgdsn.Redact(srv.AdminDSN)
		}
		wg.Go(func() {
			conn, err := connectServer(ctx, srv)
			if err != nil {
				st.Error = err.Error()
				return
			}
			defer conn.Close(context.Background())
			sizes, err := shardSizes(ctx, conn, shards)
			if err != nil {
				st.Error = (&ServerError{Server: srv.Name, Err: classify(err, "")}).Error()
				return
			}
			for _, sz := range sizes {
				st.Rows += sz.Rows
				st.Bytes += sz.Bytes
			}
		})
	}
	wg.Wait()
	return r, nil
}

// shardRanges writes sorted shard numbers compactly: [0 1 2 5 7 8] → "0-2,5,7-8".
func shardRanges(shards []int) string {
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if i == j {
			fmt.Fprintf(&b, "%d", shards[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", shards[i], shards[j])
		}
		i = j + 1
	}
	return b.String()
}
