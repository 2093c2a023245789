package inventory

import (
	"fmt"
	"strings"
)

// The rows of Read's statements, and the items each makes: pure, so that
// the DDL is tested without a server. Every identifier an item's DDL
// names is quoted here; definitions the server deparsed (views, indexes,
// constraints, functions, triggers, defaults) come quoted by the server.

// relationRow is a row of sqlInvRelations.
type relationRow struct {
	name, kind, persistence, replident string
	inherits, typed, extension         bool
	options, viewdef, replIndex        string
}

// relationItem makes the item of a relation; a table's DDL is made once
// its columns are known (tableDDL).
func relationItem(schema string, r relationRow) *Item {
	it := &Item{}
	tbl := ident(schema, r.name)
	switch r.kind {
	case "r", "p":
		it.Obj = Object{Kind: "table", Name: r.name}
		it.Def = fmt.Sprintf("kind %s persistence %s options %s", r.kind, r.persistence, r.options)
		switch {
		case r.kind == "p" || r.inherits:
			it.Why = "partitioned and inherited tables are not carried; detach or drop the partitions"
		case r.typed:
			it.Why = "typed tables (CREATE TABLE … OF type) are not carried"
		case r.persistence == "u":
			it.Why = "unlogged tables are not replicated; make it logged (ALTER TABLE … SET LOGGED) or drop it"
		}
	case "v":
		it.Obj = Object{Kind: "view", Name: r.name}
		it.Def = "options " + r.options + " " + r.viewdef
		it.DDL = "CREATE VIEW " + tbl + with(r.options) + " AS " + r.viewdef
	case "m":
		it.Obj = Object{Kind: "materialized view", Name: r.name}
		it.Def = r.viewdef
		it.Why = "a materialized view's rows are not replicated; drop it before the move and create it again after"
	case "f":
		it.Obj = Object{Kind: "foreign table", Name: r.name}
		it.Why = "foreign tables are not carried"
	case "c":
		it.Obj = Object{Kind: "type", Name: r.name}
		it.Why = "composite types are not carried"
	}
	if r.extension && it.Why == "" {
		it.Why, it.DDL = "it belongs to an extension", ""
	}
	return it
}

// replicaIdentityItem is a table's replica identity, as an object of its
// own: a table of the per-shard SQL may have had it changed.
func replicaIdentityItem(schema string, r relationRow) *Item {
	ddl := "ALTER TABLE " + ident(schema, r.name) + " REPLICA IDENTITY "
	switch r.replident {
	case "f":
		ddl += "FULL"
	case "n":
		ddl += "NOTHING"
	case "i":
		ddl += "USING INDEX " + ident(r.replIndex)
	default:
		ddl += "DEFAULT"
	}
	return &Item{Obj: Object{Kind: "replica identity", Name: r.name}, Def: r.replident + " " + r.replIndex, DDL: ddl}
}

func with(options string) string {
	if options == "" {
		return ""
	}
	return " WITH (" + options + ")"
}

// tableDDL creates a table with its columns (columnDef's) and options.
func tableDDL(schema, name string, cols []string, options string) string {
	return "CREATE TABLE " + ident(schema, name) + " (" + strings.Join(cols, ", ") + ")" + with(options)
}

// columnRow is a row of sqlInvColumns.
type columnRow struct {
	table, name, typ, def, identity, generated, collation, identSeq string
	pos                                                             int64
	notNull                                                         bool
}

// columnDef is a column as CREATE TABLE and ADD COLUMN write it. The type,
// default, collation and identity sequence come deparsed by the server.
func columnDef(r columnRow) string {
	var b strings.Builder
	b.WriteString(ident(r.name) + " " + r.typ)
	if r.collation != "" {
		b.WriteString(" COLLATE " + r.collation)
	}
	switch {
	case r.generated == "s":
		b.WriteString(" GENERATED ALWAYS AS (" + r.def + ") STORED")
	case r.identity != "":
		mode := "BY DEFAULT"
		if r.identity == "a" {
			mode = "ALWAYS"
		}
		b.WriteString(" GENERATED " + mode + " AS IDENTITY")
		if r.identSeq != "" {
			b.WriteString(" (SEQUENCE NAME " + r.identSeq + ")")
		}
	case r.def != "":
		b.WriteString(" DEFAULT " + r.def)
	}
	if r.notNull {
		b.WriteString(" NOT NULL")
	}
	return b.String()
}

// columnItem is a column, a child of its table: created with it, or added
// by ALTER TABLE when the table is there but lacks it.
func columnItem(schema string, r columnRow) *Item {
	col := columnDef(r)
	return &Item{Obj: Object{Kind: "column", Name: r.name, Table: r.table},
		Def:    fmt.Sprintf("#%d %s", r.pos, col),
		DDL:    "ALTER TABLE " + ident(schema, r.table) + " ADD COLUMN " + col,
		Parent: Key(Object{Kind: "table", Name: r.table})}
}

// sequenceRow is a row of sqlInvSequences.
type sequenceRow struct {
	name, typ                     string
	start, inc, minv, maxv, cache int64
	cycle                         bool
	deptype, ownTable, ownCol     string
}

// sequenceItems makes a sequence and, for a serial column's, its
// ownership: the table needs the sequence first, and the ownership needs
// the table. An identity column's sequence is created with its column.
func sequenceItems(schema string, r sequenceRow) []*Item {
	cyc := "NO CYCLE"
	if r.cycle {
		cyc = "CYCLE"
	}
	body := fmt.Sprintf("AS %s INCREMENT BY %d MINVALUE %d MAXVALUE %d START WITH %d CACHE %d %s", r.typ, r.inc, r.minv, r.maxv, r.start, r.cache, cyc)
	it := &Item{Obj: Object{Kind: "sequence", Name: r.name}, Def: body}
	switch {
	case r.deptype == "i":
		it.Parent = Key(Object{Kind: "column", Name: r.ownCol, Table: r.ownTable})
	case r.inc < 0:
		it.Why = "descending sequences are not carried (the cutover moves sequences up past the source's values)"
	default:
		it.DDL = "CREATE SEQUENCE " + ident(schema, r.name) + " " + body
	}
	if r.deptype != "a" {
		return []*Item{it}
	}
	return []*Item{it, {Obj: Object{Kind: "sequence ownership", Name: r.name}, Def: r.ownTable + "." + r.ownCol,
		DDL: "ALTER SEQUENCE " + ident(schema, r.name) + " OWNED BY " + ident(schema, r.ownTable, r.ownCol)}}
}

// indexRow is a row of sqlInvIndexes.
type indexRow struct {
	name, table, def, constraint string
	replIdent                    bool
}

// indexItem is an index: a constraint's comes with its constraint; the
// others are built after the copy, except a replica identity index, which
// stays with its table.
func indexItem(r indexRow) *Item {
	it := &Item{Obj: Object{Kind: "index", Name: r.name, Table: r.table}, Def: r.def, DDL: r.def, Late: !r.replIdent}
	if r.constraint != "" {
		it.DDL, it.Late = "", false
		it.Parent = Key(Object{Kind: "constraint", Name: r.constraint, Table: r.table})
	}
	return it
}

// constraintRow is a row of sqlInvConstraints.
type constraintRow struct {
	name, table, ctype, def string
	foreign, replIdentKey   bool
}

// constraintItem is a constraint (NOT NULL is a column's, in PostgreSQL
// 15). Keys and foreign keys are made after the copy, as pg_dump's
// restore does, except a key whose index is the replica identity.
func constraintItem(schema string, r constraintRow) *Item {
	it := &Item{Obj: Object{Kind: "constraint", Name: r.name, Table: r.table}, Def: r.ctype + " " + r.def,
		DDL:  "ALTER TABLE " + ident(schema, r.table) + " ADD CONSTRAINT " + ident(r.name) + " " + r.def,
		Late: (r.ctype == "p" || r.ctype == "u" || r.ctype == "x" || r.ctype == "f") && !r.replIdentKey}
	if r.foreign {
		it.Why, it.DDL = "a foreign key to a table outside the shard's schema is not carried", ""
	}
	return it
}

// functionRow is a row of sqlInvFunctions.
type functionRow struct {
	name, args, prokind, def string
	extension                bool
}

// functionItem is a function or procedure, created by its own
// pg_get_functiondef (CREATE OR REPLACE, qualified).
func functionItem(r functionRow) *Item {
	it := &Item{Obj: Object{Kind: "function", Name: r.name + "(" + r.args + ")"}, Def: r.def, DDL: r.def}
	switch {
	case r.prokind == "p":
		it.Obj.Kind = "procedure"
	case r.prokind == "a" || r.prokind == "w":
		it.Obj.Kind, it.Why, it.DDL = "aggregate", "aggregate functions are not carried", ""
	}
	if r.extension {
		it.Why, it.DDL = "it belongs to an extension", ""
	}
	return it
}

// triggerRow is a row of sqlInvTriggers.
type triggerRow struct {
	name, table, def, enabled string
}

// triggerItem is a trigger, made after the copy. One enabled for replicas
// would fire again on the target for every replicated row: refused.
func triggerItem(schema string, r triggerRow) *Item {
	it := &Item{Obj: Object{Kind: "trigger", Name: r.name, Table: r.table}, Def: r.enabled + " " + r.def, DDL: r.def, Late: true}
	switch r.enabled {
	case "D":
		it.DDL += ";\nALTER TABLE " + ident(schema, r.table) + " DISABLE TRIGGER " + ident(r.name)
	case "R", "A":
		it.Why, it.DDL = "a trigger enabled for replicas (ENABLE REPLICA/ALWAYS) would fire again on the target for every replicated row", ""
	}
	return it
}

// ownerItem gives an object the source's owner. A carried object belongs
// to the role that creates it on the target until ALTER … OWNER TO gives
// it the source's (which needs the mover's role to be that role's member,
// or a superuser: the preflight's rehearsal names the role otherwise).
func ownerItem(schema, kind, name, args, owner string) *Item {
	on, objName := sqlObject(schema, kind, name, args)
	return &Item{Obj: Object{Kind: "owner of " + kind, Name: objName}, Def: owner, DDL: "ALTER " + on + " OWNER TO " + ident(owner), Reset: true}
}

// commentItem sets (or replaces) a comment; literal is its text quoted by
// the server. An index's comes after the copy, with the index.
func commentItem(schema, kind, name, table, args, descr, literal string) *Item {
	on, objName := sqlObject(schema, kind, name, args)
	if kind == "column" {
		on = "COLUMN " + ident(schema, table, name)
	}
	return &Item{Obj: Object{Kind: "comment on " + kind, Name: objName, Table: table}, Def: descr,
		DDL: "COMMENT ON " + on + " IS " + literal, Late: kind == "index", Reset: true}
}
