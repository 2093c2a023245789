package inventory

import (
	"slices"
	"strings"
)

// grantKey is one object whose privileges an inventory records.
type grantKey struct{ kind, name, col, args string }

// grants are the privileges that objects grant beyond their owners', in
// the order the objects were read: grantee ("PUBLIC" or a quoted role) →
// privileges; a grantable one ends in *. An object with an empty map
// grants nothing beyond its owner.
type grants struct {
	order []grantKey
	by    map[grantKey]map[string][]string
}

// add records one row of sqlInvPrivileges; priv "" records the object alone.
func (g *grants) add(k grantKey, public bool, grantee, priv string, grantable bool) {
	if g.by == nil {
		g.by = map[grantKey]map[string][]string{}
	}
	m, ok := g.by[k]
	if !ok {
		m = map[string][]string{}
		g.by[k] = m
		g.order = append(g.order, k)
	}
	if priv == "" {
		return
	}
	who := ident(grantee)
	if public {
		who = "PUBLIC"
	}
	if grantable {
		priv += "*"
	}
	m[who] = append(m[who], priv)
}

// items makes one item per object: its grants to other roles as the
// definition, and as DDL the statements that give a copy of the object
// exactly those grants (REVOKE ALL FROM PUBLIC, then one GRANT per grantee
// and grant option), run when the target lacks them or has others. A
// grantee that does not exist on the target fails the GRANT, which the
// mover's preflight rehearsal reports with the role's name.
func (g *grants) items(schema string) []*Item {
	var out []*Item
	for _, k := range g.order {
		// The object in GRANT … ON on, and the privilege list's column suffix.
		on, objName := sqlObject(schema, k.kind, k.name, k.args)
		what := ""
		obj := Object{Kind: "privileges on " + k.kind, Name: objName}
		switch k.kind {
		case "column":
			on, what = "TABLE "+ident(schema, k.name), " ("+ident(k.col)+")"
			obj.Name, obj.Table = k.col, k.name
		case "view", "materialized view", "foreign table":
			on = "TABLE " + ident(schema, k.name) // GRANT names every relation TABLE
		}
		var defs []string
		stmts := []string{"REVOKE ALL" + what + " ON " + on + " FROM PUBLIC"}
		m := g.by[k]
		who := make([]string, 0, len(m))
		for w := range m {
			who = append(who, w)
		}
		slices.Sort(who)
		for _, w := range who {
			privs := m[w]
			slices.Sort(privs)
			defs = append(defs, w+"="+strings.Join(privs, ","))
			stmts = append(stmts, grantStatements(privs, what, on, w)...)
		}
		out = append(out, &Item{Obj: obj, Def: strings.Join(defs, " "), DDL: strings.Join(stmts, ";\n"), Reset: true})
	}
	return out
}

// grantStatements grants privs (a trailing * marks one with grant option)
// on on to who, what being the column suffix of a column's privileges.
func grantStatements(privs []string, what, on, who string) []string {
	var plain, withOption []string
	for _, p := range privs {
		if base, ok := strings.CutSuffix(p, "*"); ok {
			withOption = append(withOption, base+what)
		} else {
			plain = append(plain, p+what)
		}
	}
	var stmts []string
	if len(plain) > 0 {
		stmts = append(stmts, "GRANT "+strings.Join(plain, ", ")+" ON "+on+" TO "+who)
	}
	if len(withOption) > 0 {
		stmts = append(stmts, "GRANT "+strings.Join(withOption, ", ")+" ON "+on+" TO "+who+" WITH GRANT OPTION")
	}
	return stmts
}
