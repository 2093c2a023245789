package inventory

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// Read reads the inventory of schema in a transaction of its own on db
// (a pool or a transaction). own names the mover's own function and
// triggers (its write barrier), which the inventory leaves out, and
// grantees the roles whose privileges it leaves out (the application
// role's, which follow the shard's home rather than the schema).
func Read(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, schema, own string, grantees ...string) (*Inventory, error) {
	var inv *Inventory
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		inv, err = ReadIn(ctx, tx, schema, own, grantees...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the objects of %s: %w", schema, err)
	}
	return inv, nil
}

// ReadBoth reads the inventory of schema on src (unless srcInv is given)
// and on tgt at the same time.
func ReadBoth(ctx context.Context, srcInv *Inventory, src, tgt *pgxpool.Pool, schema, own string, grantees ...string) (*Inventory, *Inventory, error) {
	var tgtInv *Inventory
	g, gctx := errgroup.WithContext(ctx)
	if srcInv == nil {
		g.Go(func() (err error) {
			srcInv, err = Read(gctx, src, schema, own, grantees...)
			return err
		})
	}
	g.Go(func() (err error) {
		tgtInv, err = Read(gctx, tgt, schema, own, grantees...)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return srcInv, tgtInv, nil
}

// reader runs Read's statements inside one transaction.
type reader struct {
	ctx    context.Context
	tx     pgx.Tx
	inv    *Inventory
	schema string
	own    string
	skip   []string // grantees left out
}

// query runs sql with the schema as $1, scanning each row into scan and
// calling fn.
func (r *reader) query(sql string, scan []any, fn func()) error {
	rows, err := r.tx.Query(r.ctx, sql, r.schema)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, scan, func() error { fn(); return nil })
	return err
}

// ReadIn reads the inventory of schema inside tx (see Read). The owners
// come after the grants: a change of owner carries the owner's own entry
// along.
func ReadIn(ctx context.Context, tx pgx.Tx, schema, own string, grantees ...string) (*Inventory, error) {
	if _, err := tx.Exec(ctx, sqlInvSearchPath); err != nil {
		return nil, err
	}
	r := &reader{ctx: ctx, tx: tx, inv: New(schema), schema: schema, own: own, skip: grantees}
	for _, read := range []func() error{
		r.relations, r.sequences, r.indexes, r.constraints, r.functions, r.triggers,
		r.privileges, r.owners, r.comments, r.others,
	} {
		if err := read(); err != nil {
			return nil, err
		}
	}
	return r.inv, nil
}

// relations reads the relations, then their columns, then gives each
// table its CREATE TABLE; the replica identities come after the relations.
func (r *reader) relations() error {
	var rel relationRow
	var replIdents []*Item
	options := map[string]string{}
	if err := r.query(sqlInvRelations, []any{&rel.name, &rel.kind, &rel.persistence, &rel.replident, &rel.inherits, &rel.typed,
		&rel.extension, &rel.options, &rel.viewdef, &rel.replIndex}, func() {
		r.inv.Add(relationItem(r.schema, rel))
		if rel.kind == "r" || rel.kind == "p" {
			replIdents = append(replIdents, replicaIdentityItem(r.schema, rel))
			options[rel.name] = rel.options
		}
	}); err != nil {
		return err
	}
	for _, ri := range replIdents {
		r.inv.Add(ri)
	}
	cols := map[string][]string{}
	var c columnRow
	if err := r.query(sqlInvColumns, []any{&c.table, &c.name, &c.pos, &c.typ, &c.notNull, &c.def, &c.identity, &c.generated,
		&c.collation, &c.identSeq}, func() {
		cols[c.table] = append(cols[c.table], columnDef(c))
		r.inv.Add(columnItem(r.schema, c))
	}); err != nil {
		return err
	}
	for _, k := range r.inv.Order {
		if it := r.inv.Items[k]; it.Obj.Kind == "table" && it.Why == "" {
			it.DDL = tableDDL(r.schema, it.Obj.Name, cols[it.Obj.Name], options[it.Obj.Name])
		}
	}
	return nil
}

func (r *reader) sequences() error {
	var s sequenceRow
	return r.query(sqlInvSequences, []any{&s.name, &s.typ, &s.start, &s.inc, &s.minv, &s.maxv, &s.cache, &s.cycle,
		&s.deptype, &s.ownTable, &s.ownCol}, func() {
		for _, it := range sequenceItems(r.schema, s) {
			r.inv.Add(it)
		}
	})
}

func (r *reader) indexes() error {
	var x indexRow
	return r.query(sqlInvIndexes, []any{&x.name, &x.table, &x.def, &x.replIdent, &x.constraint}, func() {
		r.inv.Add(indexItem(x))
	})
}

func (r *reader) constraints() error {
	var k constraintRow
	return r.query(sqlInvConstraints, []any{&k.name, &k.table, &k.ctype, &k.def, &k.foreign, &k.replIdentKey}, func() {
		r.inv.Add(constraintItem(r.schema, k))
	})
}

func (r *reader) functions() error {
	var f functionRow
	return r.query(sqlInvFunctions, []any{&f.name, &f.args, &f.prokind, &f.def, &f.extension}, func() {
		if f.name != r.own {
			r.inv.Add(functionItem(f))
		}
	})
}

func (r *reader) triggers() error {
	var g triggerRow
	return r.query(sqlInvTriggers, []any{&g.name, &g.table, &g.def, &g.enabled}, func() {
		if g.name != r.own {
			r.inv.Add(triggerItem(r.schema, g))
		}
	})
}

func (r *reader) privileges() error {
	var kind, name, col, args, grantee, priv string
	var public, grantable bool
	var g grants
	if err := r.query(sqlInvPrivileges, []any{&kind, &name, &col, &args, &public, &grantee, &priv, &grantable}, func() {
		if !public && slices.Contains(r.skip, grantee) {
			grantee, priv = "", "" // the object is recorded, without this grantee's privileges
		}
		if _, objName := sqlObject(r.schema, kind, name, args); !r.inv.leavesAttributes(kind, objName, name, r.own) {
			g.add(grantKey{kind, name, col, args}, public, grantee, priv, grantable)
		}
	}); err != nil {
		return err
	}
	// With a grantee left out, a relation or schema that grants nothing
	// beyond its owner (what revoking the left-out grantee leaves) is one
	// with the default ACL, as one that granted the left-out grantee
	// alone: the two copies of a schema differ only by where the shard's
	// home is. A function's default grants PUBLIC EXECUTE, so its empty
	// ACL stays.
	if len(r.skip) > 0 {
		g.order = slices.DeleteFunc(g.order, func(k grantKey) bool {
			return len(g.by[k]) == 0 && k.kind != "function" && k.kind != "procedure"
		})
	}
	for _, it := range g.items(r.schema) {
		r.inv.Add(it)
	}
	return nil
}

func (r *reader) owners() error {
	var kind, name, args, owner string
	return r.query(sqlInvOwners, []any{&kind, &name, &args, &owner}, func() {
		if _, objName := sqlObject(r.schema, kind, name, args); !r.inv.leavesAttributes(kind, objName, "", r.own) {
			r.inv.Add(ownerItem(r.schema, kind, name, args, owner))
		}
	})
}

func (r *reader) comments() error {
	var kind, name, table, args, descr, literal string
	return r.query(sqlInvComments, []any{&kind, &name, &table, &args, &descr, &literal}, func() {
		if _, objName := sqlObject(r.schema, kind, name, args); !r.inv.leavesAttributes(kind, objName, table, r.own) {
			r.inv.Add(commentItem(r.schema, kind, name, table, args, descr, literal))
		}
	})
}

// others reads the kinds of objects a move does not carry, by name.
func (r *reader) others() error {
	var kind, name, table string
	return r.query(sqlInvOthers, []any{&kind, &name, &table}, func() {
		r.inv.Add(&Item{Obj: Object{Kind: kind, Name: name, Table: table}, Def: kind, Why: kind + "s are not carried by a move"})
	})
}
