package plugin

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
)

// pooledServer is one server's database behind its PgBouncer.
type pooledServer struct {
	b  *pgbouncer.Bouncer
	db string
}

// viaPreparedPooler is viaPooler with PgBouncers that carry prepared
// statements (1.21 or later, max_prepared_statements set) and one server
// connection per database, so that every client of a server shares its
// one backend: the statements of all of them meet there. It records
// which PgBouncer serves each server in into.
func viaPreparedPooler(t testing.TB, into map[string]pooledServer) func(server, direct string) string {
	t.Helper()
	if _, err := pgbouncer.PreparedBinary(); err != nil {
		t.Skip(err)
	}
	bouncers := map[string]*pgbouncer.Bouncer{}
	opts := pgbouncer.Options{PreparedStatements: 200, Settings: map[string]string{"default_pool_size": "1"}}
	return func(server, direct string) string {
		b := bouncerFor(t, bouncers, direct, opts)
		u, _ := url.Parse(direct)
		db := strings.TrimPrefix(u.Path, "/")
		into[server] = pooledServer{b, db}
		return b.DSN(db)
	}
}

// show runs one of PgBouncer's SHOW commands on its admin console and
// returns the rows of this server's database.
func (ps pooledServer) show(t testing.TB, what string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, ps.b.DSN("pgbouncer"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SHOW "+what, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		row := map[string]any{}
		for i, fd := range rows.FieldDescriptions() {
			row[fd.Name] = vals[i]
		}
		if row["database"] == ps.db {
			out = append(out, row)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sum adds up a numeric column of rows.
func sum(rows []map[string]any, col string) int64 {
	var n int64
	for _, r := range rows {
		switch v := r[col].(type) {
		case int64:
			n += v
		case int32:
			n += int64(v)
		}
	}
	return n
}

// serverStatement is a prepared statement on a server backend, with how
// many times it ran (generic and custom plans).
type serverStatement struct {
	Name, Statement string
	Runs            int64
}

// serverStatements lists the prepared statements on the server backend
// behind ps (its only one), asked through the pooler in the simple
// protocol so that the question prepares nothing itself.
func (ps pooledServer) serverStatements(t testing.TB) []serverStatement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ps.b.DSN(ps.db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT name, statement, generic_plans + custom_plans FROM pg_prepared_statements", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[serverStatement])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countNamed makes the plugin count the reads across shards it runs named
// and unnamed.
func countNamed(e *env) (named, unnamed func() int) {
	var mu sync.Mutex
	var n, u int
	e.p.running = func(st *readStmt) {
		mu.Lock()
		defer mu.Unlock()
		if st.named {
			n++
		} else {
			u++
		}
	}
	get := func(p *int) func() int {
		return func() int { mu.Lock(); defer mu.Unlock(); return *p }
	}
	return get(&n), get(&u)
}

// TestPreparedReadsThroughPooler: through PgBouncers that carry prepared
// statements (1.21 or later, max_prepared_statements), PreparedReadsAlways
// runs reads across shards as named statements, which the server backend
// holds (PgBouncer's PGBOUNCER_n names in pg_prepared_statements, its
// parse and bind counts), while readers of different shapes and of the
// same shape share that backend from many client connections at once,
// each getting the answer the rows written give. Each statement is parsed
// once on the server and run many times there.
func TestPreparedReadsThroughPooler(t *testing.T) {
	pooled := map[string]pooledServer{}
	e := newEnv(t, envOpts{shards: 40, appDSN: viaPreparedPooler(t, pooled),
		cfg: func(c *Config) { c.PreparedReads = PreparedReadsAlways }})
	named, unnamed := countNamed(e)
	e.p.unionBatch = 5 // four unions per server
	defer func() { e.p.unionBatch = 0 }()
	var written []Photo
	for u := range 60 {
		written = append(written, Photo{UserID: int64(u + 1), Caption: "c", Likes: u % 5})
	}
	if err := e.db.Create(&written).Error; err != nil {
		t.Fatal(err)
	}
	// Worker w reads its own shape (likes >= w, a literal: a text of its
	// own) ordered, and a count whose text every worker shares (likes >=
	// ?, a parameter).
	const workers, rounds = 5, 6
	want := func(w int) (ids []int64, n int64) {
		for _, p := range written {
			if p.Likes >= w {
				ids = append(ids, p.ID)
			}
		}
		slices.Sort(ids)
		slices.Reverse(ids)
		return ids[:min(7, len(ids))], int64(len(ids))
	}
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			wantIDs, wantN := want(w)
			for i := range rounds {
				var ps []Photo
				if err := e.db.Clauses(AllShards()).Where(fmt.Sprintf("likes >= %d", w)).Order("id desc").Limit(7).Find(&ps).Error; err != nil {
					return fmt.Errorf("worker %d, round %d: ordered read: %w", w, i, err)
				}
				got := make([]int64, len(ps))
				for j, p := range ps {
					got[j] = p.ID
				}
				if !slices.Equal(got, wantIDs) {
					return fmt.Errorf("worker %d, round %d: ordered read %v, want %v", w, i, got, wantIDs)
				}
				var n int64
				if err := e.db.Clauses(AllShards()).Model(&Photo{}).Where("likes >= ?", w).Count(&n).Error; err != nil {
					return fmt.Errorf("worker %d, round %d: count: %w", w, i, err)
				}
				if n != wantN {
					return fmt.Errorf("worker %d, round %d: count %d, want %d", w, i, n, wantN)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if named() == 0 || unnamed() != 0 {
		t.Fatalf("%d named and %d unnamed statements, want every read across shards named", named(), unnamed())
	}
	for _, s := range e.servers {
		ps := pooled[s]
		clients, servers := ps.show(t, "CLIENTS"), ps.show(t, "SERVERS")
		if len(servers) != 1 || len(clients) < 2 {
			t.Errorf("server %s: %d client connections on %d server connections, want several on one", s, len(clients), len(servers))
		}
		// Workers' shapes: 4 unions each of an ordered read per worker and
		// of the shared count.
		if n := sum(servers, "prepared_statements"); n < 4*(workers+1) {
			t.Errorf("server %s: PgBouncer says %d statements are prepared on its server connection, want at least %d", s, n, 4*(workers+1))
		}
		var unions, runs int64
		onServer := ps.serverStatements(t)
		for _, st := range onServer {
			if strings.HasPrefix(st.Name, "PGBOUNCER_") && strings.Contains(st.Statement, "UNION ALL") {
				unions++
				runs += st.Runs
			}
		}
		// Every read ran prepared: 4 unions per read, two reads per round.
		if unions < 4*(workers+1) || runs < 4*2*workers*rounds {
			t.Errorf("server %s: %d reads across shards prepared on the server backend, run %d times; want at least %d, run %d times:\n%v",
				s, unions, runs, 4*(workers+1), 4*2*workers*rounds, onServer)
		}
	}
}

// TestPreparedReadsPoolerDefault: with the default PreparedReadsDirect, a
// server behind a pooler (its application DSN is not its admin DSN) gets
// its reads across shards unnamed, even from a PgBouncer that would carry
// named ones: nothing is parsed as a named statement there, nothing is
// prepared on the backend.
func TestPreparedReadsPoolerDefault(t *testing.T) {
	pooled := map[string]pooledServer{}
	e := newEnv(t, envOpts{appDSN: viaPreparedPooler(t, pooled)})
	named, unnamed := countNamed(e)
	if err := e.db.Create(&[]Photo{{UserID: 1}, {UserID: 2}}).Error; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var n int64
		if err := e.db.Clauses(AllShards()).Model(&Photo{}).Count(&n).Error; err != nil || n != 2 {
			t.Fatalf("count: %d, %v; want 2", n, err)
		}
		var ps []Photo
		if err := e.db.Clauses(AllShards()).Order("id desc").Limit(5).Find(&ps).Error; err != nil || len(ps) != 2 {
			t.Fatalf("ordered read: %d rows, %v; want 2", len(ps), err)
		}
	}
	if named() != 0 || unnamed() == 0 {
		t.Fatalf("%d named and %d unnamed statements, want every read across shards unnamed", named(), unnamed())
	}
	for _, s := range e.servers {
		ps := pooled[s]
		if n := sum(ps.show(t, "SERVERS"), "prepared_statements"); n != 0 {
			t.Errorf("server %s: PgBouncer says %d statements are prepared on its server connection, want none", s, n)
		}
		if st := ps.serverStatements(t); len(st) != 0 {
			t.Errorf("server %s: prepared statements on the server backend: %v, want none", s, st)
		}
	}
}

// TestPreparedReadsThroughPoolerSurviveSchemaChange: a column added to
// every shard changes the result type of a SELECT * already prepared on
// the server backend, where PgBouncer keeps it for every client of that
// text (its documentation: "cached plan must not change result type"
// until RECONNECT). Reads across shards through it still answer, with the
// new column, and after the first failure run prepared again: under a
// new text (planGeneration), not failing on the stale statement each time.
func TestPreparedReadsThroughPoolerSurviveSchemaChange(t *testing.T) {
	pooled := map[string]pooledServer{}
	e := newEnv(t, envOpts{appDSN: viaPreparedPooler(t, pooled), cfg: func(c *Config) {
		c.PreparedReads = PreparedReadsAlways
		c.MaxOpenConns = 2
	}})
	if err := e.db.Create(&[]Photo{{UserID: 1}, {UserID: 2}}).Error; err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB) ([]map[string]any, error) {
		var out []map[string]any
		err := db.Model(&Photo{}).Clauses(AllShards()).Order("id").Find(&out).Error
		return out, err
	}
	if _, err := read(e.db); err != nil {
		t.Fatal(err)
	}
	e.addNoteColumn(t)
	for i := range 3 {
		out, err := read(e.db)
		if err != nil {
			t.Fatalf("read %d after the column was added: %v", i, err)
		}
		if len(out) != 2 || out[0]["note"] != "new" {
			t.Fatalf("read %d after the column was added: %v", i, out)
		}
	}
	// The first read after the change failed on the stale statement and
	// ran unnamed; the next two ran a statement prepared after it.
	for _, s := range e.servers {
		var fresh int64
		onServer := pooled[s].serverStatements(t)
		for _, st := range onServer {
			if strings.HasPrefix(st.Statement, "/* shardkit plans 1 */") {
				fresh += st.Runs
			}
		}
		if fresh != 2 {
			t.Errorf("server %s: the read ran %d times prepared after the change, want 2:\n%v", s, fresh, onServer)
		}
	}
}
