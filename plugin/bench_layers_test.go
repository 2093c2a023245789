package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"
)

// BenchmarkScatterLayers: where the client's CPU of a read of all 2000
// shards goes, layer by layer. The plugin's ordered read
// (BenchmarkScatter's, prepared, direct) runs beside the same 20
// statements, taken from the plugin as it sent them, run four ways, one
// goroutine per server and the servers at once as the plugin runs them:
//
//   - execute: the plugin's execute stage without planning, merging or
//     scanning (readPipelined: a server's statements as one pipeline on
//     the pool's pgx connection, each value converted as pgx's
//     database/sql driver converts it);
//   - sql_readall: through database/sql and pgx's driver with the
//     plugin's readAll, the plugin's execute stage before readNamed;
//   - pgconn: through pgconn, one statement after another, every value's
//     bytes copied;
//   - pgconn_pipeline: the same sent as one pipeline per server, a Sync
//     after each statement (each its own transaction, so a server's lock
//     table holds one statement's locks at a time, as now);
//   - pgconn_pipeline_one_sync: one Sync for the server's statements (one
//     transaction: every statement's locks held until the last ends, as
//     a pgx Batch does).
//
// Each is paired read by read with the same read of one unsharded table
// of the same rows (plain GORM), as BenchmarkScatter's are, and reports
// the same metrics: the ratio of clock times, client and server CPU per
// read. The modes run in three interleaved rounds.
//
//	go test ./plugin -run '^$' -bench BenchmarkScatterLayers -benchtime 100x
func BenchmarkScatterLayers(b *testing.B) {
	const shards, perShard, limit = 2000, 20, 50
	e := newEnv(b, envOpts{shards: shards, four: true, noIDs: true})
	plain := seedScatter(b, e, perShard)
	plainRead := func() error {
		var ps []Photo
		return plain.Order("id desc").Limit(limit).Find(&ps).Error
	}
	ctx := context.Background()
	all := e.db.Clauses(AllShards()).Session(&gorm.Session{})
	read := func() error {
		var ps []Photo
		if err := all.Order("id desc").Limit(limit).Find(&ps).Error; err != nil {
			return err
		}
		if len(ps) != limit {
			return fmt.Errorf("%d rows", len(ps))
		}
		return nil
	}
	// The statements of one read, by server, in the order sent.
	var mu sync.Mutex
	texts := map[string][]string{}
	var servers []string
	e.p.running = func(st *readStmt) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := texts[st.server]; !ok {
			servers = append(servers, st.server)
		}
		texts[st.server] = append(texts[st.server], st.sql)
	}
	if err := read(); err != nil {
		b.Fatal(err)
	}
	e.p.running = nil
	stmts := 0
	for _, s := range servers {
		stmts += len(texts[s])
	}
	wantRows := stmts * limit // every statement of 100 shards of 20 rows fills its page

	snap := e.r.Snapshot()
	pgconns := make([]*pgconn.PgConn, len(servers))
	dbs := make([]*sql.DB, len(servers))
	for j, name := range servers {
		srv, _ := snap.Server(name)
		c, err := pgx.Connect(ctx, srv.DSN)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		pgconns[j] = c.PgConn()
		for i, q := range texts[name] {
			if _, err := pgconns[j].Prepare(ctx, stmtName(i), q, nil); err != nil {
				b.Fatal(err)
			}
		}
		db, err := sql.Open("pgx", srv.DSN)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		dbs[j] = db
	}
	// perServer runs fn for each server at once and checks that they
	// read every row the statements return.
	perServer := func(fn func(j int) (int, error)) error {
		var g errgroup.Group
		rows := make([]int, len(servers))
		for j := range servers {
			g.Go(func() (err error) {
				rows[j], err = fn(j)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		n := 0
		for _, k := range rows {
			n += k
		}
		if n != wantRows {
			return fmt.Errorf("%d rows, want %d", n, wantRows)
		}
		return nil
	}
	consume := func(rr *pgconn.ResultReader) (int, error) {
		n := 0
		for rr.NextRow() {
			for _, v := range rr.Values() {
				_ = append([]byte(nil), v...)
			}
			n++
		}
		_, err := rr.Close()
		return n, err
	}
	// viaStage runs each server's statements through an execute stage
	// of the plugin's, one after another.
	viaStage := func(run func(db *sql.DB, q string) (partials, error)) func() error {
		return func() error {
			return perServer(func(j int) (int, error) {
				n := 0
				for _, q := range texts[servers[j]] {
					pt, err := run(dbs[j], q)
					if err != nil {
						return n, err
					}
					n += len(pt.rows)
				}
				return n, nil
			})
		}
	}
	viaExecute := func() error {
		return perServer(func(j int) (n int, err error) {
			var ps []pipeStmt
			for _, q := range texts[servers[j]] {
				ps = append(ps, pipeStmt{sql: q})
			}
			readPipelined(ctx, dbs[j], ps, 0, func(_ int, pt partials, e error) bool {
				n += len(pt.rows)
				err = e
				return e == nil
			})
			return n, err
		})
	}
	viaSQL := viaStage(func(db *sql.DB, q string) (partials, error) { return readAll(ctx, db, q, []any{asPrepared}) })
	viaPgconn := func() error {
		return perServer(func(j int) (int, error) {
			n := 0
			for i := range texts[servers[j]] {
				k, err := consume(pgconns[j].ExecPrepared(ctx, stmtName(i), nil, nil, nil))
				if err != nil {
					return n, err
				}
				n += k
			}
			return n, nil
		})
	}
	pipelined := func(syncEach bool) func() error {
		return func() error {
			return perServer(func(j int) (n int, err error) {
				p := pgconns[j].StartPipeline(ctx)
				defer func() {
					if cerr := p.Close(); err == nil {
						err = cerr
					}
				}()
				for i := range texts[servers[j]] {
					p.SendQueryPrepared(stmtName(i), nil, nil, nil)
					if syncEach {
						p.SendPipelineSync()
					}
				}
				if !syncEach {
					p.SendPipelineSync()
				}
				if err := p.Flush(); err != nil {
					return 0, err
				}
				syncs := 1
				if syncEach {
					syncs = len(texts[servers[j]])
				}
				for syncs > 0 {
					r, err := p.GetResults()
					if err != nil {
						return n, err
					}
					switch r := r.(type) {
					case *pgconn.ResultReader:
						k, err := consume(r)
						if err != nil {
							return n, err
						}
						n += k
					case *pgconn.PipelineSync:
						syncs--
					}
				}
				return n, nil
			})
		}
	}
	modes := []struct {
		name string
		fn   func() error
	}{
		{"plugin", read},
		{"execute", viaExecute},
		{"sql_readall", viaSQL},
		{"pgconn", viaPgconn},
		{"pgconn_pipeline", pipelined(true)},
		{"pgconn_pipeline_one_sync", pipelined(false)},
	}
	for _, m := range modes {
		for range 5 {
			if err := m.fn(); err != nil {
				b.Fatalf("%s: %v", m.name, err)
			}
			_ = plainRead()
		}
	}
	for round := range 3 {
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/round_%d", m.name, round), func(b *testing.B) {
				pairedReads(b, shards, m.fn, plainRead)
			})
		}
	}
}

func stmtName(i int) string { return fmt.Sprintf("layers_%d", i) }
