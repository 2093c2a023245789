package inventory

// Statements of Read, run with search_path pg_catalog. $1 is the schema.
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
