package rebalance

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// A shard schema may hold objects that shardkit's per-shard SQL did not
// create: tables, sequences, indexes, views, functions made by raw SQL or
// another migration tool. A move carries them. The mover reads an
// inventory of the schema from the system catalogs on both sides (with
// search_path pg_catalog, so every name outside pg_catalog is qualified and
// the text of a definition is the same on any server holding the same
// schema), and creates on the target what the target lacks, from the
// source's own deparsed definitions (pg_get_indexdef, pg_get_viewdef,
// pg_get_functiondef, …). What it cannot carry faithfully it refuses, in
// the preflight, before anything changes. The same inventory, compared on
// both sides, is part of Verify.

// SchemaObject is one object of a shard schema.
type SchemaObject struct {
	Kind  string // "table", "column", "sequence", "index", "constraint", "view", "function", "trigger", …
	Name  string // name in the schema; a function's with its argument types
	Table string // the table of a column, index, constraint or trigger; "" otherwise
}

func (o SchemaObject) String() string {
	if o.Table != "" {
		return fmt.Sprintf("%s %s on %s", o.Kind, o.Name, o.Table)
	}
	return o.Kind + " " + o.Name
}

// item is one object in an inventory: how it is defined (comparable
// across servers) and the statements that create it on a server lacking it.
type item struct {
	obj    SchemaObject
	def    string
	ddl    string // "" when it cannot be carried (why says why) or comes with parent
	why    string
	parent string // key of the object that creates this one with itself, if any
	late   bool   // created after the copy (keys, indexes, foreign keys, triggers; see stripTarget)
	reset  bool   // ddl also brings a differing copy to this one (owners, grants, comments)
}

func (it *item) key() string { return objKey(it.obj) }

func objKey(o SchemaObject) string { return o.Kind + "\x00" + o.Table + "\x00" + o.Name }

// inventory is every object of one shard schema on one server.
type inventory struct {
	schema string
	items  map[string]*item
	order  []string // keys in creation order (oid), for a stable apply order
}

// refused reports whether the inventory holds an object the move cannot
// carry, by kind and inventory name.
func (inv *inventory) refused(kind, name string) bool {
	it, ok := inv.items[objKey(SchemaObject{Kind: kind, Name: name})]
	return ok && it.why != ""
}

// leavesAttributes reports whether the owner, grants and comments of an
// object (by kind and inventory name; a column's by its relation) are not
// the inventory's to carry: those of shardkit's write barrier, the
// mover's own, and of an object the move refuses, which its refusal
// already names.
func (inv *inventory) leavesAttributes(kind, name, relation string) bool {
	if kind == "column" {
		for _, k := range []string{"table", "view", "materialized view", "foreign table"} {
			if inv.refused(k, relation) {
				return true
			}
		}
		return false
	}
	if (kind == "function" || kind == "procedure") && strings.HasPrefix(name, barrierName+"(") {
		return true
	}
	return inv.refused(kind, name)
}

func (inv *inventory) add(it *item) {
	k := it.key()
	if _, ok := inv.items[k]; !ok {
		inv.order = append(inv.order, k)
	}
	inv.items[k] = it
}

// Inventory statements, run with search_path pg_catalog. $1 is the schema.
const (
	sqlInvSearchPath = `SET LOCAL search_path = pg_catalog`
	sqlInvRelations  = `SELECT c.relname::text, c.relkind::text, c.relpersistence::text, c.relreplident::text,
       c.relispartition OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid),
       c.reloftype <> 0,
       EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'),
       coalesce(array_to_string(c.reloptions, ', '), ''),
       CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) ELSE '' END,
       coalesce((SELECT ri.relname::text FROM pg_index x JOIN pg_class ri ON ri.oid = x.indexrelid
                 WHERE x.indrelid = c.oid AND x.indisreplident), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
ORDER BY c.oid`
	sqlInvColumns = `SELECT c.relname::text, a.attname::text,
       row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
       format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text, a.attgenerated::text,
       CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
            THEN (SELECT format('%I.%I', cn.nspname, co.collname) FROM pg_collation co
                  JOIN pg_namespace cn ON cn.oid = co.collnamespace WHERE co.oid = a.attcollation) ELSE '' END,
       CASE WHEN a.attidentity <> '' THEN coalesce(pg_get_serial_sequence(format('%I.%I', n.nspname, c.relname), a.attname), '') ELSE '' END
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'f') AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY c.oid, a.attnum`
	sqlInvSequences = `SELECT c.relname::text, format_type(q.seqtypid, NULL), q.seqstart, q.seqincrement, q.seqmin, q.seqmax,
       q.seqcache, q.seqcycle, coalesce(d.deptype::text, ''), coalesce(t.relname::text, ''), coalesce(a.attname::text, '')
FROM pg_sequence q
JOIN pg_class c ON c.oid = q.seqrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
     AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i')
LEFT JOIN pg_class t ON t.oid = d.refobjid
LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE n.nspname = $1
ORDER BY c.oid`
	sqlInvIndexes = `SELECT i.relname::text, t.relname::text, pg_get_indexdef(i.oid), x.indisreplident,
       coalesce((SELECT k.conname::text FROM pg_constraint k WHERE k.conindid = i.oid AND k.conrelid = t.oid
                 AND k.contype IN ('p', 'u', 'x')), '')
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = i.relnamespace
WHERE n.nspname = $1
ORDER BY i.oid`
	sqlInvConstraints = `SELECT k.conname::text, t.relname::text, k.contype::text, pg_get_constraintdef(k.oid),
       k.contype = 'f' AND fn.nspname <> n.nspname,
       k.contype <> 'f' AND coalesce((SELECT x.indisreplident FROM pg_index x WHERE x.indexrelid = k.conindid), false)
FROM pg_constraint k
JOIN pg_class t ON t.oid = k.conrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
LEFT JOIN pg_class f ON f.oid = k.confrelid
LEFT JOIN pg_namespace fn ON fn.oid = f.relnamespace
WHERE n.nspname = $1
ORDER BY k.oid`
	sqlInvFunctions = `SELECT p.proname::text, pg_get_function_identity_arguments(p.oid), p.prokind::text,
       CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid) ELSE '' END,
       EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1
ORDER BY p.oid`
	sqlInvTriggers = `SELECT g.tgname::text, t.relname::text, pg_get_triggerdef(g.oid), g.tgenabled::text
FROM pg_trigger g
JOIN pg_class t ON t.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND NOT g.tgisinternal
ORDER BY g.oid`
	// sqlRelKind names a pg_class row c's kind as the inventory does.
	sqlRelKind = `CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                WHEN 'i' THEN 'index' WHEN 'f' THEN 'foreign table' ELSE 'table' END`

	// Privileges on the schema and its relations, columns and functions
	// that grant something to a role other than the object's owner (the
	// owner's own entry differs between servers whose objects have
	// different owners, and goes with ownership): one row per grant, and
	// one row with no grantee for an object whose ACL grants nothing
	// beyond its owner (a function with EXECUTE revoked from PUBLIC).
	// Objects with the default ACL (NULL) have no rows.
	sqlInvPrivileges = `SELECT o.kind, o.name, o.col, o.args, coalesce(e.grantee = 0, false), coalesce(r.rolname::text, ''),
       coalesce(e.privilege_type, ''), coalesce(e.is_grantable, false)
FROM (
    SELECT ` + sqlRelKind + ` AS kind,
           c.relname::text AS name, '' AS col, '' AS args, c.relowner AS owner, c.relacl AS acl, c.oid AS ord
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND c.relacl IS NOT NULL
    UNION ALL
    SELECT 'column', c.relname::text, a.attname::text, '', c.relowner, a.attacl, c.oid
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attacl IS NOT NULL
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END, p.proname::text, '',
           pg_get_function_identity_arguments(p.oid), p.proowner, p.proacl, p.oid
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = $1 AND p.proacl IS NOT NULL AND p.prokind IN ('f', 'p')
    UNION ALL
    SELECT 'schema', n.nspname::text, '', '', n.nspowner, n.nspacl, 0 FROM pg_namespace n
     WHERE n.nspname = $1 AND n.nspacl IS NOT NULL
) o
LEFT JOIN LATERAL aclexplode(o.acl) e ON e.grantee <> o.owner
LEFT JOIN pg_roles r ON r.oid = e.grantee
ORDER BY o.ord, o.col, 6, 7`

	// Owners of the schema, its relations and functions; a sequence owned
	// by a column and an index go with their table.
	sqlInvOwners = `SELECT o.kind, o.name, o.args, r.rolname::text
FROM (
    SELECT ` + sqlRelKind + ` AS kind,
           c.relname::text AS name, '' AS args, c.relowner AS owner, c.oid AS ord
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                       AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
    UNION ALL
    SELECT CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END, p.proname::text,
           pg_get_function_identity_arguments(p.oid), p.proowner, p.oid
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.prokind IN ('f', 'p')
    UNION ALL
    SELECT 'schema', n.nspname::text, '', n.nspowner, 0 FROM pg_namespace n WHERE n.nspname = $1
) o JOIN pg_roles r ON r.oid = o.owner
ORDER BY o.ord`

	// Comments on the schema, its relations (indexes included), columns
	// and functions, each with its text as a literal quoted by the server.
	sqlInvComments = `SELECT o.kind, o.name, o.tbl, o.args, d.description, quote_literal(d.description)
FROM pg_description d JOIN (
    SELECT 'pg_class'::regclass AS cls, c.oid, 0 AS sub,
           ` + sqlRelKind + ` AS kind,
           c.relname::text AS name, coalesce(t.relname::text, '') AS tbl, '' AS args
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_index x ON x.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = x.indrelid
     WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'i', 'f')
    UNION ALL
    SELECT 'pg_class'::regclass, c.oid, a.attnum, 'column', a.attname::text, c.relname::text, ''
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
    UNION ALL
    SELECT 'pg_proc'::regclass, p.oid, 0, CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END,
           p.proname::text, '', pg_get_function_identity_arguments(p.oid)
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.prokind IN ('f', 'p')
    UNION ALL
    SELECT 'pg_namespace'::regclass, n.oid, 0, 'schema', n.nspname::text, '', '' FROM pg_namespace n WHERE n.nspname = $1
) o ON d.classoid = o.cls AND d.objoid = o.oid AND d.objsubid = o.sub
ORDER BY o.oid, o.sub`

	// Kinds of objects a move does not carry, by name.
	sqlInvOthers = `SELECT 'type', t.typname::text, '' FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname = $1 AND t.typrelid = 0 AND t.typcategory <> 'A'
UNION ALL SELECT 'rule', r.rulename::text, c.relname::text FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND r.rulename <> '_RETURN'
UNION ALL SELECT 'policy', p.polname::text, c.relname::text FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
UNION ALL SELECT 'statistics object', s.stxname::text, '' FROM pg_statistic_ext s
    JOIN pg_namespace n ON n.oid = s.stxnamespace WHERE n.nspname = $1
UNION ALL SELECT 'collation', o.collname::text, '' FROM pg_collation o JOIN pg_namespace n ON n.oid = o.collnamespace WHERE n.nspname = $1
UNION ALL SELECT 'operator', o.oprname::text, '' FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace WHERE n.nspname = $1
UNION ALL SELECT 'operator class', o.opcname::text, '' FROM pg_opclass o JOIN pg_namespace n ON n.oid = o.opcnamespace WHERE n.nspname = $1
UNION ALL SELECT 'operator family', o.opfname::text, '' FROM pg_opfamily o JOIN pg_namespace n ON n.oid = o.opfnamespace WHERE n.nspname = $1
UNION ALL SELECT 'text search configuration', o.cfgname::text, '' FROM pg_ts_config o JOIN pg_namespace n ON n.oid = o.cfgnamespace WHERE n.nspname = $1
UNION ALL SELECT 'text search dictionary', o.dictname::text, '' FROM pg_ts_dict o JOIN pg_namespace n ON n.oid = o.dictnamespace WHERE n.nspname = $1
UNION ALL SELECT 'conversion', o.conname::text, '' FROM pg_conversion o JOIN pg_namespace n ON n.oid = o.connamespace WHERE n.nspname = $1`
)

// readInventory reads the inventory of schema, in a transaction of its own
// on a pool, or inside tx.
func readInventory(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, schema string) (*inventory, error) {
	var inv *inventory
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		inv, err = inventoryIn(ctx, tx, schema)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the objects of %s: %w", schema, err)
	}
	return inv, nil
}

// readInventories reads the inventory of schema on src (unless srcInv is
// given) and on tgt at the same time.
func readInventories(ctx context.Context, srcInv *inventory, src, tgt *pgxpool.Pool, schema string) (*inventory, *inventory, error) {
	var tgtInv *inventory
	g, gctx := errgroup.WithContext(ctx)
	if srcInv == nil {
		g.Go(func() (err error) {
			srcInv, err = readInventory(gctx, src, schema)
			return err
		})
	}
	g.Go(func() (err error) {
		tgtInv, err = readInventory(gctx, tgt, schema)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return srcInv, tgtInv, nil
}

func inventoryIn(ctx context.Context, tx pgx.Tx, schema string) (*inventory, error) {
	if _, err := tx.Exec(ctx, sqlInvSearchPath); err != nil {
		return nil, err
	}
	inv := &inventory{schema: schema, items: map[string]*item{}}
	q := func(sql string, scan []any, fn func()) error {
		rows, err := tx.Query(ctx, sql, schema)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, scan, func() error { fn(); return nil })
		return err
	}
	tbl := func(t string) string { return ident(schema, t) }

	// Relations.
	var name, kind, persistence, replident, reloptions, viewdef, replIndex string
	var inherits, typed, extension bool
	var replIdents []*item
	relOptions := map[string]string{}
	if err := q(sqlInvRelations, []any{&name, &kind, &persistence, &replident, &inherits, &typed, &extension, &reloptions, &viewdef, &replIndex}, func() {
		it := &item{}
		switch kind {
		case "r", "p":
			it.obj = SchemaObject{Kind: "table", Name: name}
			it.def = fmt.Sprintf("kind %s persistence %s options %s", kind, persistence, reloptions)
			switch {
			case kind == "p" || inherits:
				it.why = "partitioned and inherited tables are not carried; detach or drop the partitions"
			case typed:
				it.why = "typed tables (CREATE TABLE … OF type) are not carried"
			case persistence == "u":
				it.why = "unlogged tables are not replicated; make it logged (ALTER TABLE … SET LOGGED) or drop it"
			case extension:
				it.why = "it belongs to an extension"
			}
			// The replica identity, as an object of its own: a table of the
			// per-shard SQL may have had it changed.
			ri := &item{obj: SchemaObject{Kind: "replica identity", Name: name}, def: replident + " " + replIndex}
			switch replident {
			case "f":
				ri.ddl = "ALTER TABLE " + tbl(name) + " REPLICA IDENTITY FULL"
			case "n":
				ri.ddl = "ALTER TABLE " + tbl(name) + " REPLICA IDENTITY NOTHING"
			case "i":
				ri.ddl = "ALTER TABLE " + tbl(name) + " REPLICA IDENTITY USING INDEX " + ident(replIndex)
			default:
				ri.ddl = "ALTER TABLE " + tbl(name) + " REPLICA IDENTITY DEFAULT"
			}
			replIdents = append(replIdents, ri)
			relOptions[name] = reloptions
		case "v":
			it.obj = SchemaObject{Kind: "view", Name: name}
			it.def = "options " + reloptions + " " + viewdef
			with := ""
			if reloptions != "" {
				with = " WITH (" + reloptions + ")"
			}
			it.ddl = "CREATE VIEW " + tbl(name) + with + " AS " + viewdef
		case "m":
			it.obj = SchemaObject{Kind: "materialized view", Name: name}
			it.def = viewdef
			it.why = "a materialized view's rows are not replicated; drop it before the move and create it again after"
		case "f":
			it.obj = SchemaObject{Kind: "foreign table", Name: name}
			it.why = "foreign tables are not carried"
		case "c":
			it.obj = SchemaObject{Kind: "type", Name: name}
			it.why = "composite types are not carried"
		}
		if extension && it.why == "" {
			it.why, it.ddl = "it belongs to an extension", ""
		}
		inv.add(it)
	}); err != nil {
		return nil, err
	}
	for _, ri := range replIdents {
		inv.add(ri)
	}

	// Columns: each a child of its table, created with it; added by ALTER
	// TABLE when the table is there but lacks it.
	tableCols := map[string][]string{}
	var table, typ, def, identity, generated, collation, identSeq string
	var pos int64
	var notNull bool
	if err := q(sqlInvColumns, []any{&table, &name, &pos, &typ, &notNull, &def, &identity, &generated, &collation, &identSeq}, func() {
		var b strings.Builder
		b.WriteString(ident(name) + " " + typ)
		if collation != "" {
			b.WriteString(" COLLATE " + collation)
		}
		switch {
		case generated == "s":
			b.WriteString(" GENERATED ALWAYS AS (" + def + ") STORED")
		case identity != "":
			mode := "BY DEFAULT"
			if identity == "a" {
				mode = "ALWAYS"
			}
			b.WriteString(" GENERATED " + mode + " AS IDENTITY")
			if identSeq != "" {
				b.WriteString(" (SEQUENCE NAME " + identSeq + ")")
			}
		case def != "":
			b.WriteString(" DEFAULT " + def)
		}
		if notNull {
			b.WriteString(" NOT NULL")
		}
		col := b.String()
		tableCols[table] = append(tableCols[table], col)
		inv.add(&item{obj: SchemaObject{Kind: "column", Name: name, Table: table},
			def:    fmt.Sprintf("#%d %s", pos, col),
			ddl:    "ALTER TABLE " + tbl(table) + " ADD COLUMN " + col,
			parent: objKey(SchemaObject{Kind: "table", Name: table})})
	}); err != nil {
		return nil, err
	}
	for _, k := range inv.order {
		it := inv.items[k]
		if it.obj.Kind == "table" && it.why == "" {
			it.ddl = "CREATE TABLE " + tbl(it.obj.Name) + " (" + strings.Join(tableCols[it.obj.Name], ", ") + ")"
			if o := relOptions[it.obj.Name]; o != "" {
				it.ddl += " WITH (" + o + ")"
			}
		}
	}

	// Sequences.
	var start, inc, minv, maxv, cache int64
	var cycle bool
	var deptype, ownTable, ownCol string
	if err := q(sqlInvSequences, []any{&name, &typ, &start, &inc, &minv, &maxv, &cache, &cycle, &deptype, &ownTable, &ownCol}, func() {
		cyc := "NO CYCLE"
		if cycle {
			cyc = "CYCLE"
		}
		body := fmt.Sprintf("AS %s INCREMENT BY %d MINVALUE %d MAXVALUE %d START WITH %d CACHE %d %s", typ, inc, minv, maxv, start, cache, cyc)
		it := &item{obj: SchemaObject{Kind: "sequence", Name: name}, def: body}
		switch {
		case deptype == "i":
			// An identity column's: created with its column.
			it.parent = objKey(SchemaObject{Kind: "column", Name: ownCol, Table: ownTable})
		case inc < 0:
			it.why = "descending sequences are not carried (the cutover moves sequences up past the source's values)"
		default:
			it.ddl = "CREATE SEQUENCE " + tbl(name) + " " + body
		}
		inv.add(it)
		if deptype == "a" {
			// A serial column's: the table needs the sequence first, and
			// the ownership needs the table.
			inv.add(&item{obj: SchemaObject{Kind: "sequence ownership", Name: name}, def: ownTable + "." + ownCol,
				ddl: "ALTER SEQUENCE " + tbl(name) + " OWNED BY " + ident(schema, ownTable, ownCol)})
		}
	}); err != nil {
		return nil, err
	}

	// Indexes: those of constraints come with their constraint; the
	// others are built after the copy, except a replica identity index,
	// which stays with its table (see stripTarget).
	var isReplIdent bool
	var conName string
	if err := q(sqlInvIndexes, []any{&name, &table, &def, &isReplIdent, &conName}, func() {
		it := &item{obj: SchemaObject{Kind: "index", Name: name, Table: table}, def: def, ddl: def, late: !isReplIdent}
		if conName != "" {
			it.ddl, it.late = "", false
			it.parent = objKey(SchemaObject{Kind: "constraint", Name: conName, Table: table})
		}
		inv.add(it)
	}); err != nil {
		return nil, err
	}

	// Constraints (NOT NULL is a column's, in PostgreSQL 15). Keys and
	// foreign keys are made after the copy, as pg_dump's restore does,
	// except a key whose index is the replica identity.
	var ctype string
	var foreign, replIdentKey bool
	if err := q(sqlInvConstraints, []any{&name, &table, &ctype, &def, &foreign, &replIdentKey}, func() {
		it := &item{obj: SchemaObject{Kind: "constraint", Name: name, Table: table}, def: ctype + " " + def,
			ddl:  "ALTER TABLE " + tbl(table) + " ADD CONSTRAINT " + ident(name) + " " + def,
			late: (ctype == "p" || ctype == "u" || ctype == "x" || ctype == "f") && !replIdentKey}
		if foreign {
			it.why, it.ddl = "a foreign key to a table outside the shard's schema is not carried", ""
		}
		inv.add(it)
	}); err != nil {
		return nil, err
	}

	// Functions; shardkit's write barrier is the mover's own.
	var args, prokind string
	if err := q(sqlInvFunctions, []any{&name, &args, &prokind, &def, &extension}, func() {
		if name == barrierName {
			return
		}
		it := &item{obj: SchemaObject{Kind: "function", Name: name + "(" + args + ")"}, def: def, ddl: def}
		switch {
		case prokind == "p":
			it.obj.Kind = "procedure"
		case prokind == "a" || prokind == "w":
			it.obj.Kind, it.why, it.ddl = "aggregate", "aggregate functions are not carried", ""
		}
		if extension {
			it.why, it.ddl = "it belongs to an extension", ""
		}
		inv.add(it)
	}); err != nil {
		return nil, err
	}

	// Triggers; shardkit's write barrier's are the mover's own.
	var enabled string
	if err := q(sqlInvTriggers, []any{&name, &table, &def, &enabled}, func() {
		if name == barrierName {
			return
		}
		it := &item{obj: SchemaObject{Kind: "trigger", Name: name, Table: table}, def: enabled + " " + def, ddl: def, late: true}
		switch enabled {
		case "D":
			it.ddl += ";\nALTER TABLE " + tbl(table) + " DISABLE TRIGGER " + ident(name)
		case "R", "A":
			it.why, it.ddl = "a trigger enabled for replicas (ENABLE REPLICA/ALWAYS) would fire again on the target for every replicated row", ""
		}
		inv.add(it)
	}); err != nil {
		return nil, err
	}

	if err := inventoryPrivileges(q, inv); err != nil {
		return nil, err
	}

	// Owners: a carried object belongs to the role that creates it on the
	// target until ALTER … OWNER TO gives it the source's owner (which
	// needs the mover's role to be that role's member, or a superuser:
	// the preflight's rehearsal names the role otherwise). After the
	// grants: a change of owner carries the owner's own entry along.
	var owner string
	if err := q(sqlInvOwners, []any{&kind, &name, &args, &owner}, func() {
		on, objName := sqlObject(schema, kind, name, args)
		if inv.leavesAttributes(kind, objName, "") {
			return
		}
		obj := SchemaObject{Kind: "owner of " + kind, Name: objName}
		inv.add(&item{obj: obj, def: owner, ddl: "ALTER " + on + " OWNER TO " + ident(owner), reset: true})
	}); err != nil {
		return nil, err
	}

	// Comments: set (or replaced) by COMMENT ON; an index's after the
	// copy, with the index.
	var descr, literal string
	if err := q(sqlInvComments, []any{&kind, &name, &table, &args, &descr, &literal}, func() {
		on, objName := sqlObject(schema, kind, name, args)
		if inv.leavesAttributes(kind, objName, table) {
			return
		}
		if kind == "column" {
			on = "COLUMN " + ident(schema, table, name)
		}
		obj := SchemaObject{Kind: "comment on " + kind, Name: objName, Table: table}
		inv.add(&item{obj: obj, def: descr, ddl: "COMMENT ON " + on + " IS " + literal, late: kind == "index", reset: true})
	}); err != nil {
		return nil, err
	}

	var okind, oname, otable string
	if err := q(sqlInvOthers, []any{&okind, &oname, &otable}, func() {
		inv.add(&item{obj: SchemaObject{Kind: okind, Name: oname, Table: otable}, def: okind,
			why: okind + "s are not carried by a move"})
	}); err != nil {
		return nil, err
	}
	return inv, nil
}

// schemaDiff is what a target lacks of a source's schema, and where the
// two differ beyond that.
type schemaDiff struct {
	missing []*item      // on the source only; each carried unless why is set
	differ  []difference // present on both with different definitions, or on the target only
	reset   []staleCopy  // present on both, differing, and brought to the source's by its ddl
}

// staleCopy is an owner, grants or comment that differ on the target, and
// the source's item, whose ddl resets them.
type staleCopy struct {
	difference
	src *item
}

// toCreate is what a carry runs: the missing items and the resets.
func (d schemaDiff) toCreate() []*item {
	out := append([]*item(nil), d.missing...)
	for _, r := range d.reset {
		out = append(out, r.src)
	}
	return out
}

// differences are the differences beyond the missing objects, the
// stale copies included.
func (d schemaDiff) differences() []difference {
	out := append([]difference(nil), d.differ...)
	for _, r := range d.reset {
		out = append(out, r.difference)
	}
	return out
}

// difference is an object whose definition differs between two copies of
// a shard schema, or that one copy lacks.
type difference struct {
	Object         SchemaObject
	Source, Target string // the definitions; "" where the object is absent
}

func (d difference) String() string {
	switch {
	case d.Source == "":
		return d.Object.String() + " is on the target only"
	case d.Target == "":
		return d.Object.String() + " is on the source only"
	}
	return fmt.Sprintf("%s differs: source %q, target %q", d.Object, d.Source, d.Target)
}

// diffInventories compares src with tgt. An object whose parent is missing
// too is left out of missing: it is created with its parent.
func diffInventories(src, tgt *inventory) schemaDiff {
	var d schemaDiff
	for _, k := range src.order {
		s := src.items[k]
		t, ok := tgt.items[k]
		if !ok {
			if s.parent != "" {
				if _, pok := tgt.items[s.parent]; !pok {
					if _, psrc := src.items[s.parent]; psrc {
						continue
					}
				}
			}
			d.missing = append(d.missing, s)
			continue
		}
		if s.def != t.def {
			df := difference{Object: s.obj, Source: s.def, Target: t.def}
			if s.reset && s.why == "" {
				d.reset = append(d.reset, staleCopy{df, s})
				continue
			}
			d.differ = append(d.differ, df)
		}
	}
	for _, k := range tgt.order {
		if _, ok := src.items[k]; !ok {
			d.differ = append(d.differ, difference{Object: tgt.items[k].obj, Target: tgt.items[k].def})
		}
	}
	return d
}

// carryFailure is an object that could not be created on the target.
type carryFailure struct {
	it  *item
	err error
}

// createMissing creates items on the server of tx, in passes: an item
// that fails (it needs one not created yet) is tried again after the
// others, until a pass creates nothing. Each runs under a savepoint, so
// the failures leave tx usable; they are returned.
func createMissing(ctx context.Context, tx pgx.Tx, schema string, items []*item) ([]carryFailure, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog; SET LOCAL check_function_bodies = off",
		pgx.QueryExecModeSimpleProtocol); err != nil {
		return nil, err
	}
	pending := items
	for len(pending) > 0 {
		var next []carryFailure
		for _, it := range pending {
			if _, err := tx.Exec(ctx, "SAVEPOINT shardkit_carry;\n"+it.ddl, pgx.QueryExecModeSimpleProtocol); err != nil {
				if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT shardkit_carry"); rerr != nil {
					return nil, rerr
				}
				next = append(next, carryFailure{it, err})
				continue
			}
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT shardkit_carry"); err != nil {
				return nil, err
			}
		}
		if len(next) == len(pending) {
			return next, nil
		}
		pending = pending[:0]
		for _, f := range next {
			pending = append(pending, f.it)
		}
	}
	return nil, nil
}

// carriable splits missing items into those to create now (late or not)
// and those that cannot be carried.
func carriable(missing []*item, late bool) (create, refused []*item) {
	for _, it := range missing {
		switch {
		case it.why != "":
			refused = append(refused, it)
		case it.ddl == "":
			// Comes with an object the target has: nothing to run, and the
			// comparison after the carry reports it if it is still missing.
		case it.late == late || late:
			create = append(create, it)
		}
	}
	return create, refused
}

// carry creates on the target the objects of the source's schema that the
// target lacks: before the copy (late false) all but the secondary
// indexes, after it (late true) the rest, and then the two schemas must
// match object for object (else ErrCannotCarry, naming the differences).
// It is idempotent: what the target has already is left alone. srcInv, if
// not nil, is the source's inventory read earlier in the same step (the
// source's schema does not change during a move), else it is read here.
func carry(ctx context.Context, srcInv *inventory, src, tgt *pgxpool.Pool, schema string, late bool) error {
	var err error
	if srcInv == nil {
		if srcInv, err = readInventory(ctx, src, schema); err != nil {
			return err
		}
	}
	err = pgx.BeginFunc(ctx, tgt, func(tx pgx.Tx) error {
		tgtInv, err := inventoryIn(ctx, tx, schema)
		if err != nil {
			return err
		}
		create, refused := carriable(diffInventories(srcInv, tgtInv).toCreate(), late)
		if len(refused) > 0 {
			return fmt.Errorf("%w: %s", ErrCannotCarry, objectList(refused, nil))
		}
		failures, err := createMissing(ctx, tx, schema, create)
		if err != nil {
			return err
		}
		if len(failures) > 0 {
			its := make([]*item, len(failures))
			errs := make([]error, len(failures))
			for i, f := range failures {
				its[i], errs[i] = f.it, f.err
			}
			return fmt.Errorf("%w: %s", ErrCannotCarry, objectList(its, errs))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("carry the objects of %s to the target: %w", schema, err)
	}
	if !late {
		return nil
	}
	return sameObjects(ctx, srcInv, src, tgt, schema)
}

// sameObjects compares the inventories of a schema on two servers; srcInv,
// if not nil, stands for the source's.
func sameObjects(ctx context.Context, srcInv *inventory, src, tgt *pgxpool.Pool, schema string) error {
	a, b, err := readInventories(ctx, srcInv, src, tgt, schema)
	if err != nil {
		return err
	}
	d := diffInventories(a, b)
	var diffs []string
	for _, it := range d.missing {
		diffs = append(diffs, it.obj.String()+" is on the source only")
	}
	for _, df := range d.differences() {
		diffs = append(diffs, df.String())
	}
	if len(diffs) > 0 {
		return &ObjectsError{Schema: schema, Differences: diffs}
	}
	return nil
}

// ObjectsError reports two copies of a shard schema whose objects differ
// (tables, columns, indexes, constraints, views, functions, triggers).
type ObjectsError struct {
	Schema      string
	Differences []string
}

func (e *ObjectsError) Error() string {
	return fmt.Sprintf("shardkit: verify %s: %v: objects differ: %s; do not complete the move; roll it back or resume it",
		e.Schema, ErrMismatch, strings.Join(e.Differences, "; "))
}

// Unwrap returns ErrMismatch.
func (e *ObjectsError) Unwrap() error { return ErrMismatch }

func objectList(items []*item, errs []error) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.obj.String()
		if it.why != "" {
			parts[i] += " (" + it.why + ")"
		}
		if errs != nil {
			parts[i] += " (" + pgMessage(errs[i]) + ")"
		}
	}
	return strings.Join(parts, "; ")
}

// grantKey is one object whose privileges an inventory records.
type grantKey struct{ kind, name, col, args string }

// inventoryPrivileges adds to inv one item per object whose ACL grants
// something beyond its owner's defaults (sqlInvPrivileges): its grants to
// other roles as the definition, and as DDL the statements that give a
// copy of the object exactly those grants (REVOKE ALL FROM PUBLIC, then
// one GRANT per grantee and grant option), run when the target lacks
// them or has others (not for the objects leavesAttributes leaves). A
// grantee that does not exist on the target fails the GRANT, which the
// preflight's rehearsal reports with the role's name.
func inventoryPrivileges(q func(string, []any, func()) error, inv *inventory) error {
	var kind, name, col, args, grantee, priv string
	var public, grantable bool
	var order []grantKey
	grants := map[grantKey]map[string][]string{} // grantee → privileges ("" key: none); a grantable one ends in *
	if err := q(sqlInvPrivileges, []any{&kind, &name, &col, &args, &public, &grantee, &priv, &grantable}, func() {
		if _, objName := sqlObject(inv.schema, kind, name, args); inv.leavesAttributes(kind, objName, name) {
			return
		}
		k := grantKey{kind, name, col, args}
		g, ok := grants[k]
		if !ok {
			g = map[string][]string{}
			grants[k] = g
			order = append(order, k)
		}
		if priv == "" {
			return // nothing granted beyond the owner
		}
		who := ident(grantee)
		if public {
			who = "PUBLIC"
		}
		if grantable {
			priv += "*"
		}
		g[who] = append(g[who], priv)
	}); err != nil {
		return err
	}
	for _, k := range order {
		// The object in GRANT … ON on, and the privilege list's column suffix.
		on, objName := sqlObject(inv.schema, k.kind, k.name, k.args)
		what := ""
		obj := SchemaObject{Kind: "privileges on " + k.kind, Name: objName}
		switch k.kind {
		case "column":
			on, what = "TABLE "+ident(inv.schema, k.name), " ("+ident(k.col)+")"
			obj.Name, obj.Table = k.col, k.name
		case "view", "materialized view", "foreign table":
			on = "TABLE " + ident(inv.schema, k.name) // GRANT names every relation TABLE
		}
		var defs []string
		stmts := []string{"REVOKE ALL" + what + " ON " + on + " FROM PUBLIC"}
		g := grants[k]
		who := make([]string, 0, len(g))
		for w := range g {
			who = append(who, w)
		}
		slices.Sort(who)
		for _, w := range who {
			privs := g[w]
			slices.Sort(privs)
			defs = append(defs, w+"="+strings.Join(privs, ","))
			var plain, withOption []string
			for _, p := range privs {
				if base, ok := strings.CutSuffix(p, "*"); ok {
					withOption = append(withOption, base+what)
				} else {
					plain = append(plain, p+what)
				}
			}
			if len(plain) > 0 {
				stmts = append(stmts, "GRANT "+strings.Join(plain, ", ")+" ON "+on+" TO "+w)
			}
			if len(withOption) > 0 {
				stmts = append(stmts, "GRANT "+strings.Join(withOption, ", ")+" ON "+on+" TO "+w+" WITH GRANT OPTION")
			}
		}
		inv.add(&item{obj: obj, def: strings.Join(defs, " "), ddl: strings.Join(stmts, ";\n"), reset: true})
	}
	return nil
}

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
