package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// takeFanout removes and returns a statement's multi-shard plan.
func takeFanout(stmt *gorm.Statement) *fanout {
	c, ok := stmt.Clauses[fanoutName]
	if !ok {
		return nil
	}
	delete(stmt.Clauses, fanoutName)
	f, _ := c.Expression.(*fanout)
	return f
}

// saved is the part of a statement a fan-out changes per shard.
type saved struct {
	table   string
	conn    gorm.ConnPool
	dest    any
	rv      reflect.Value
	clauses map[string]clause.Clause
}

func save(stmt *gorm.Statement) saved {
	return saved{table: stmt.Table, conn: stmt.ConnPool, dest: stmt.Dest, rv: stmt.ReflectValue, clauses: maps.Clone(stmt.Clauses)}
}

func (s saved) restore(stmt *gorm.Statement) {
	stmt.Table, stmt.ConnPool, stmt.Dest, stmt.ReflectValue = s.table, s.conn, s.dest, s.rv
	stmt.Clauses = s.clauses
}

// prepare points a statement at one shard of a fan-out and clears what
// the previous shard's run built.
func (p *Plugin) prepare(db *gorm.DB, f *fanout, shard int, base map[string]clause.Clause) error {
	stmt := db.Statement
	pl, err := f.snap.Placement(shard)
	if err != nil {
		return err
	}
	if !f.read && pl.State == router.StateFenced {
		if pl, err = p.waitFence(stmt.Context, shard); err != nil {
			return err
		}
	}
	stmt.Table = f.m.qualified[shard]
	stmt.SQL.Reset()
	stmt.Vars = nil
	stmt.Clauses = maps.Clone(base)
	if f.tx != nil {
		v, err := f.tx.view(pl.Server, f.snap)
		if err != nil {
			return err
		}
		stmt.ConnPool = v
		return nil
	}
	if _, inTx := stmt.ConnPool.(gorm.TxCommitter); inTx && txOf(stmt.ConnPool) == nil {
		return fmt.Errorf("%w: the statement runs in a transaction not begun through the plugin's connection", ErrUnroutableSQL)
	}
	srv, err := p.pools.get(f.snap, pl.Server)
	if err != nil {
		return err
	}
	stmt.ConnPool = p.conn(stmt, srv, f.read)
	return nil
}

// execCreate replaces gorm:create: one INSERT per shard of the rows.
func (p *Plugin) execCreate(db *gorm.DB) {
	f := takeFanout(db.Statement)
	if f == nil {
		p.runWrite(db, p.orig.create)
		return
	}
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	ptrs := reflect.SliceOf(reflect.PointerTo(f.m.schema.ModelType))
	var total int64
	for _, shard := range f.shards {
		idx := f.rows[shard]
		group := reflect.MakeSlice(ptrs, len(idx), len(idx))
		for i, r := range idx {
			group.Index(i).Set(reflect.Indirect(s.rv.Index(r)).Addr())
		}
		if err := p.prepare(db, f, shard, s.clauses); err != nil {
			fail(db, f.m, shard, err)
			return
		}
		stmt.Dest, stmt.ReflectValue = group.Interface(), group
		p.runWrite(db, p.orig.create)
		if db.Error != nil {
			return
		}
		total += db.RowsAffected
	}
	db.RowsAffected = total
}

// execWrite replaces gorm:update and gorm:delete: the same statement on
// each shard, rows affected summed.
func (p *Plugin) execWrite(orig func(*gorm.DB)) func(*gorm.DB) {
	return func(db *gorm.DB) {
		f := takeFanout(db.Statement)
		if f == nil {
			p.runWrite(db, orig)
			return
		}
		stmt := db.Statement
		s := save(stmt)
		defer s.restore(stmt)
		var total int64
		for _, shard := range f.shards {
			if err := p.prepare(db, f, shard, s.clauses); err != nil {
				fail(db, f.m, shard, err)
				return
			}
			stmt.Dest, stmt.ReflectValue = s.dest, s.rv
			p.runWrite(db, orig)
			if db.Error != nil {
				return
			}
			total += db.RowsAffected
		}
		db.RowsAffected = total
	}
}

// runWrite runs one shard's write. A refusal by the source server's fence
// means the shard moved: outside a user transaction the map is reloaded
// and the write retried once on the new home; inside one, the error
// becomes ErrShardMoved.
func (p *Plugin) runWrite(db *gorm.DB, orig func(*gorm.DB)) {
	orig(db)
	if db.Error == nil || !router.IsFenceError(db.Error) {
		return
	}
	stmt := db.Statement
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		return
	}
	old := serverOf(stmt.ConnPool)
	t := txOf(stmt.ConnPool)
	moved := &ShardError{Shard: shard, Server: old, Table: m.table, Err: fmt.Errorf("%w: %w", ErrShardMoved, db.Error)}
	if t != nil && !t.statement {
		_, _ = p.router.Reload(stmt.Context)
		db.Error = moved
		return
	}
	snap, pl, err := p.awaitMove(stmt.Context, shard, old)
	if err != nil {
		db.Error = moved
		return
	}
	if t != nil {
		t.drop(old)
		v, err := t.view(pl.Server, snap)
		if err != nil {
			db.Error = moved
			return
		}
		stmt.ConnPool = v
	} else {
		srv, err := p.pools.get(snap, pl.Server)
		if err != nil {
			db.Error = moved
			return
		}
		stmt.ConnPool = srv
	}
	db.Error = nil
	stmt.SQL.Reset()
	stmt.Vars = nil
	orig(db)
	if db.Error != nil && router.IsFenceError(db.Error) {
		db.Error = &ShardError{Shard: shard, Server: pl.Server, Table: m.table, Err: fmt.Errorf("%w: %w", ErrShardMoved, db.Error)}
	}
}

// awaitMove reloads the map until the shard has left server old and is
// not fenced, for at most FenceWait.
func (p *Plugin) awaitMove(ctx context.Context, shard int, old string) (*router.Snapshot, router.Placement, error) {
	deadline := time.Now().Add(max(p.cfg.FenceWait, 0))
	for {
		snap, err := p.router.Reload(ctx)
		if err != nil {
			return nil, router.Placement{}, err
		}
		pl, err := snap.Placement(shard)
		if err != nil {
			return nil, pl, err
		}
		if pl.Server != old && pl.State != router.StateFenced {
			return snap, pl, nil
		}
		if time.Now().After(deadline) {
			return nil, pl, ErrShardMoved
		}
		select {
		case <-ctx.Done():
			return nil, pl, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// serverOf names the server behind a routed connection.
func serverOf(cp gorm.ConnPool) string {
	switch c := cp.(type) {
	case *serverDB:
		return c.name
	case *txView:
		return c.server
	}
	return ""
}

// execQuery replaces gorm:query: one shard as usual (inside a read-only
// transaction with the shard's search_path when the query joins other
// tables), or each shard of a fan-out with the results merged.
func (p *Plugin) execQuery(db *gorm.DB) {
	f := takeFanout(db.Statement)
	if f == nil {
		p.runQuery(db)
		return
	}
	p.fanoutQuery(db, f)
}

func (p *Plugin) runQuery(db *gorm.DB) {
	stmt := db.Statement
	if len(stmt.Joins) == 0 || db.DryRun || db.Error != nil {
		p.orig.query(db)
		return
	}
	pool, ok := stmt.ConnPool.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	})
	if !ok {
		p.orig.query(db) // a transaction: pinned, search_path already set
		return
	}
	m, shard, _ := p.lookup(stmt)
	if m == nil || shard < 0 {
		p.orig.query(db)
		return
	}
	tx, err := pool.BeginTx(stmt.Context, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		fail(db, m, shard, err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(stmt.Context, setSearchPath, pgx.Identifier{router.SchemaName(shard)}.Sanitize()); err != nil {
		fail(db, m, shard, err)
		return
	}
	cp := stmt.ConnPool
	stmt.ConnPool = tx
	p.orig.query(db)
	stmt.ConnPool = cp
	if db.Error == nil {
		db.AddError(tx.Commit())
	}
}
