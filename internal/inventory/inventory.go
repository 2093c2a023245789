// Package inventory reads the objects of a shard schema from the system
// catalogs, generates the DDL that creates each on a server lacking it,
// compares two copies, and carries what one lacks.
//
// A shard schema may hold objects that shardkit's per-shard SQL did not
// create: tables, sequences, indexes, views, functions made by raw SQL or
// another migration tool. A move carries them. Read runs with search_path
// pg_catalog, so every name outside pg_catalog is qualified and the text
// of a definition is the same on any server holding the same schema; the
// DDL comes from the source's own deparsed definitions (pg_get_indexdef,
// pg_get_viewdef, pg_get_functiondef, …) and quotes every identifier it
// writes itself. What cannot be carried faithfully is marked (Item.Why),
// for the mover's preflight to refuse before anything changes.
//
//	src, _ := inventory.Read(ctx, srcPool, schema, own)
//	dst, _ := inventory.Read(ctx, dstPool, schema, own)
//	create, refused := inventory.Carriable(inventory.Compare(src, dst).ToCreate(), true)
package inventory

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Object is one object of a shard schema.
type Object struct {
	Kind  string // "table", "column", "sequence", "index", "constraint", "view", "function", "trigger", …
	Name  string // name in the schema; a function's with its argument types
	Table string // the table of a column, index, constraint or trigger; "" otherwise
}

func (o Object) String() string {
	if o.Table != "" {
		return fmt.Sprintf("%s %s on %s", o.Kind, o.Name, o.Table)
	}
	return o.Kind + " " + o.Name
}

// Item is one object in an inventory: how it is defined (comparable
// across servers) and the statements that create it on a server lacking it.
type Item struct {
	Obj    Object
	Def    string
	DDL    string // "" when it cannot be carried (Why says why) or comes with Parent
	Why    string
	Parent string // Key of the object that creates this one with itself, if any
	Late   bool   // created after the copy: keys, indexes, foreign keys, triggers
	Reset  bool   // DDL also brings a differing copy to this one (owners, grants, comments)
}

// Key identifies the item's object in an Inventory.
func (it *Item) Key() string { return Key(it.Obj) }

// Key identifies an object in an Inventory.
func Key(o Object) string { return o.Kind + "\x00" + o.Table + "\x00" + o.Name }

// Inventory is every object of one shard schema on one server.
type Inventory struct {
	Schema string
	Items  map[string]*Item
	Order  []string // keys in creation order (oid), for a stable apply order
}

// New returns an empty inventory of schema.
func New(schema string) *Inventory {
	return &Inventory{Schema: schema, Items: map[string]*Item{}}
}

// Add adds it, or replaces the item of the same object in place.
func (inv *Inventory) Add(it *Item) {
	k := it.Key()
	if _, ok := inv.Items[k]; !ok {
		inv.Order = append(inv.Order, k)
	}
	inv.Items[k] = it
}

// refused reports whether the inventory holds an object that cannot be
// carried, by kind and inventory name.
func (inv *Inventory) refused(kind, name string) bool {
	it, ok := inv.Items[Key(Object{Kind: kind, Name: name})]
	return ok && it.Why != ""
}

// leavesAttributes reports whether the owner, grants and comments of an
// object (by kind and inventory name; a column's by its relation) are not
// the inventory's to carry: those of the mover's own objects, and of an
// object that is refused, whose refusal already names it.
func (inv *Inventory) leavesAttributes(kind, name, relation, own string) bool {
	if kind == "column" {
		for _, k := range []string{"table", "view", "materialized view", "foreign table"} {
			if inv.refused(k, relation) {
				return true
			}
		}
		return false
	}
	if (kind == "function" || kind == "procedure") && strings.HasPrefix(name, own+"(") {
		return true
	}
	return inv.refused(kind, name)
}

// ConstraintIndex returns the index that constraint con owns, or nil.
func (inv *Inventory) ConstraintIndex(con *Item) *Item {
	for _, k := range inv.Order {
		if it := inv.Items[k]; it.Obj.Kind == "index" && it.Parent == con.Key() {
			return it
		}
	}
	return nil
}

// ident quotes an identifier, or a qualified name's parts.
func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// sqlObject names an object of schema as ALTER, COMMENT ON and GRANT … ON
// do, given its kind as the inventory names it ("table", "view",
// "sequence", "function", "procedure", "schema", …), and returns its
// inventory name (a function's with its argument types).
func sqlObject(schema, kind, name, args string) (on, invName string) {
	switch kind {
	case "schema":
		return "SCHEMA " + ident(schema), name
	case "function", "procedure":
		return strings.ToUpper(kind) + " " + ident(schema, name) + "(" + args + ")", name + "(" + args + ")"
	}
	return strings.ToUpper(kind) + " " + ident(schema, name), name
}
