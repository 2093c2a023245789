package plugin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/router"
)

// copyColumns are the columns CopyFrom writes, chosen as GORM's Create
// chooses an INSERT's columns.
type copyColumns struct {
	// fields are written for every row: the primary key and the fields
	// without a database default, in the model's column order.
	fields []*schema.Field
	// optional fields have a database default: written for rows where
	// they are non-zero, left to the default where zero (Create sends
	// DEFAULT there).
	optional []*schema.Field
}

func copyColumnsOf(m *model) (copyColumns, error) {
	var c copyColumns
	for _, name := range m.schema.DBNames {
		f := m.schema.FieldsByDBName[name]
		if !f.Creatable {
			continue
		}
		if f == m.pk || !f.HasDefaultValue || f.DefaultValueInterface != nil {
			c.fields = append(c.fields, f)
		} else {
			c.optional = append(c.optional, f)
		}
	}
	if len(c.optional) > 64 {
		return c, fmt.Errorf("shardkit: %w: CopyFrom of %s: %d columns with database defaults, at most 64", ErrInvalidModel, m.schema.Name, len(c.optional))
	}
	return c, nil
}

// mask says which optional fields of a row are set.
func (c copyColumns) mask(ctx context.Context, row reflect.Value) uint64 {
	var m uint64
	for i, f := range c.optional {
		if _, zero := f.ValueOf(ctx, row); !zero {
			m |= 1 << i
		}
	}
	return m
}

// of returns the columns written for rows with a mask.
func (c copyColumns) of(mask uint64) []*schema.Field {
	out := append([]*schema.Field(nil), c.fields...)
	for i, f := range c.optional {
		if mask&(1<<i) != 0 {
			out = append(out, f)
		}
	}
	return out
}

// copyTypes remembers, for one CopyFrom, the column types of each set of
// columns on each server, read once from the server.
type copyTypes struct {
	mu sync.Mutex
	by map[string][]uint32
}

func (t *copyTypes) get(ctx context.Context, conn *pgconn.PgConn, server string, table pgx.Identifier, mask uint64, cols []*schema.Field) ([]uint32, error) {
	key := fmt.Sprintf("%s/%x", server, mask)
	t.mu.Lock()
	oids, ok := t.by[key]
	t.mu.Unlock()
	if ok {
		return oids, nil
	}
	sd, err := conn.Prepare(ctx, "", "SELECT "+columnList(cols)+" FROM "+table.Sanitize(), nil)
	if err != nil {
		return nil, err
	}
	if len(sd.Fields) != len(cols) {
		return nil, fmt.Errorf("%w: %s has %d of CopyFrom's %d columns", ErrInvalidModel, table.Sanitize(), len(sd.Fields), len(cols))
	}
	oids = make([]uint32, len(cols))
	for i, f := range sd.Fields {
		oids[i] = f.DataTypeOID
	}
	t.mu.Lock()
	if t.by == nil {
		t.by = map[string][]uint32{}
	}
	t.by[key] = oids
	t.mu.Unlock()
	return oids, nil
}

// columnList quotes column names for SQL.
func columnList(cols []*schema.Field) string {
	var b strings.Builder
	for i, f := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{f.DBName}.Sanitize())
	}
	return b.String()
}

// copyIDs fills the zero IDs of a part from Config.IDs: a run per shard
// from a source with Fill, else one at a time. Rows left without an ID
// (no source, or no slot) take theirs from the shard's next_id() in the
// part's transaction.
func (p *Plugin) copyIDs(ctx context.Context, l *copyLoad, j *copyJob) error {
	var zero []int
	for _, i := range j.Index {
		if m := l.m.pk.ReflectValueOf(ctx, l.row(i)); m.IsZero() {
			zero = append(zero, i)
		}
	}
	if len(zero) == 0 {
		return nil
	}
	src := p.cfg.IDs
	if src == nil {
		j.needIDs = zero
		return nil
	}
	ids := make([]int64, len(zero))
	var err error
	if f, ok := src.(interface {
		Fill(ctx context.Context, shard int, ids []int64) error
	}); ok {
		err = f.Fill(ctx, j.Shard, ids)
	} else {
		for k := range ids {
			if ids[k], err = src.Next(ctx, j.Shard); err != nil {
				break
			}
		}
	}
	if err != nil {
		if p.cfg.NoSlot(err) {
			j.needIDs = zero
			return nil
		}
		return fmt.Errorf("new IDs: %w", err)
	}
	for k, i := range zero {
		setRowID(l.m.pk.ReflectValueOf(ctx, l.row(i)), ids[k])
	}
	return nil
}

func setRowID(pk reflect.Value, id int64) {
	if pk.Kind() == reflect.Int64 || pk.Kind() == reflect.Int {
		pk.SetInt(id)
	} else {
		pk.SetUint(uint64(id))
	}
}

// row returns the caller's i-th row.
func (l *copyLoad) row(i int) reflect.Value { return reflect.Indirect(l.rv.Index(i)) }

const nextIDsSQL = "SELECT %s() FROM generate_series(1, $1)"

// copyOnServer writes a part on one server, atomically: one COPY is a
// transaction by itself; a part of several COPYs (rows that set different
// columns), or whose IDs come from the shard's next_id(), runs in one
// explicit transaction. On error, the state says whether the part may be
// in the shard (CopyUnknown: the connection broke while the commit was
// under way) or surely is not (CopyFailed).
func (p *Plugin) copyOnServer(ctx context.Context, l *copyLoad, j *copyJob, snap *router.Snapshot, server string, types *copyTypes) (CopyState, error) {
	srv, err := p.pools.get(snap, server)
	if err != nil {
		return CopyFailed, err
	}
	conn, err := srv.DB.Conn(ctx)
	if err != nil {
		return CopyFailed, err
	}
	defer conn.Close()
	state := CopyFailed
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("%w: CopyFrom needs server pools of pgx's database/sql driver (Config.OpenDB), got %T", ErrInvalidConfig, dc)
		}
		pc := c.Conn()
		schemaName := router.SchemaName(j.Shard)
		groups := l.groups(ctx, j.Index)
		var tx pgx.Tx
		if len(groups) > 1 || len(j.needIDs) > 0 {
			var err error
			if tx, err = pc.Begin(ctx); err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }() // nothing after a commit
		}
		if len(j.needIDs) > 0 {
			rows, _ := tx.Query(ctx, fmt.Sprintf(nextIDsSQL, pgx.Identifier{schemaName, "next_id"}.Sanitize()), len(j.needIDs))
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return fmt.Errorf("new IDs from the shard's next_id(): %w", err)
			}
			for k, i := range j.needIDs {
				setRowID(l.m.pk.ReflectValueOf(ctx, l.row(i)), ids[k])
			}
		}
		table := pgx.Identifier{schemaName, l.m.table}
		for _, g := range groups {
			cols := l.cols.of(g.mask)
			oids, err := types.get(ctx, pc.PgConn(), server, table, g.mask, cols)
			if err != nil {
				return err
			}
			r := &copyRows{ctx: ctx, tm: pc.TypeMap(), oids: oids, cols: cols, l: l, idx: g.idx}
			sql := "COPY " + table.Sanitize() + " (" + columnList(cols) + ") FROM STDIN BINARY"
			if _, err := pc.PgConn().CopyFrom(ctx, r, sql); err != nil {
				if tx == nil && commitUnknown(err) {
					state = CopyUnknown
				}
				return err
			}
		}
		if tx != nil {
			if err := tx.Commit(ctx); err != nil {
				if !errors.Is(err, pgx.ErrTxCommitRollback) && commitUnknown(err) {
					state = CopyUnknown
				}
				return err
			}
		}
		state = CopyCommitted
		return nil
	})
	return state, err
}

// commitUnknown reports whether a statement that commits may have
// committed despite its error: the server did not answer with an error,
// and the request may have reached it.
func commitUnknown(err error) bool {
	var pe *pgconn.PgError
	return !errors.As(err, &pe) && !pgconn.SafeToRetry(err)
}

// copyGroup is a part's rows that write the same columns.
type copyGroup struct {
	mask uint64
	idx  []int
}

// groups splits a part's rows by the optional columns they set; usually
// there is one group.
func (l *copyLoad) groups(ctx context.Context, idx []int) []copyGroup {
	if len(l.cols.optional) == 0 {
		return []copyGroup{{idx: idx}}
	}
	var gs []copyGroup
	at := map[uint64]int{}
	for _, i := range idx {
		m := l.cols.mask(ctx, l.row(i))
		k, ok := at[m]
		if !ok {
			k = len(gs)
			at[m] = k
			gs = append(gs, copyGroup{mask: m})
		}
		gs[k].idx = append(gs[k].idx, i)
	}
	return gs
}

// copyRows is the binary COPY stream of some rows, encoded as it is read.
type copyRows struct {
	ctx    context.Context
	tm     *pgtype.Map
	oids   []uint32
	cols   []*schema.Field
	l      *copyLoad
	idx    []int
	buf    []byte
	off    int
	header bool
	done   bool
}

const copyChunk = 64 << 10

// Read is part of io.Reader.
func (r *copyRows) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

// fill encodes the next rows, about copyChunk bytes of them.
func (r *copyRows) fill() error {
	buf := r.buf[:0]
	r.off = 0
	if !r.header {
		buf = append(buf, "PGCOPY\n\377\r\n\000"...)
		buf = binary.BigEndian.AppendUint32(buf, 0) // flags
		buf = binary.BigEndian.AppendUint32(buf, 0) // header extension
		r.header = true
	}
	for len(buf) < copyChunk && len(r.idx) > 0 {
		row := r.l.row(r.idx[0])
		buf = binary.BigEndian.AppendUint16(buf, uint16(len(r.cols)))
		for k, f := range r.cols {
			v, _ := f.ValueOf(r.ctx, row)
			sp := len(buf)
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // NULL unless encoded
			out, err := r.tm.Encode(r.oids[k], pgtype.BinaryFormatCode, v, buf)
			if err != nil {
				r.buf = buf
				return fmt.Errorf("encode %s of row %d: %w", f.DBName, r.idx[0], err)
			}
			if out != nil {
				buf = out
				binary.BigEndian.PutUint32(buf[sp:], uint32(len(buf)-sp-4))
			}
		}
		r.idx = r.idx[1:]
	}
	if len(r.idx) == 0 {
		buf = binary.BigEndian.AppendUint16(buf, 0xffff) // trailer
		r.done = true
	}
	r.buf = buf
	return nil
}
