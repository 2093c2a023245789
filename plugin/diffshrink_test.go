package plugin

import (
	"slices"
	"strings"
)

// Shrinking a failing case, and naming what it uses.

// shrinks returns smaller variants of a case, simplest first.
func (c dcase) shrinks() []dcase {
	var out []dcase
	add := func(f func(*dcase)) {
		d := c.clone()
		f(&d)
		out = append(out, d)
	}
	for i := range c.Calls {
		add(func(d *dcase) { d.Calls = append(d.Calls[:i:i], d.Calls[i+1:]...) })
	}
	if c.All {
		add(func(d *dcase) { d.All = false })
	}
	if c.SkipTx {
		add(func(d *dcase) { d.SkipTx = false })
	}
	if c.Returning {
		add(func(d *dcase) { d.Returning = false })
	}
	if c.Model != nil {
		add(func(d *dcase) { d.Model = nil })
	}
	if c.Select != nil {
		add(func(d *dcase) { d.Select = nil })
	}
	if c.Omit != nil {
		add(func(d *dcase) { d.Omit = nil })
	}
	if c.Order != "" {
		add(func(d *dcase) { d.Order = "" })
		if c.Order != "id" {
			add(func(d *dcase) { d.Order = "id" })
		}
	}
	if c.Limit != 0 {
		add(func(d *dcase) { d.Limit = 0 })
	}
	if c.Agg != nil && c.Agg.Having > 0 {
		add(func(d *dcase) { d.Agg.Having = 0 })
	}
	if c.Agg != nil && c.Agg.Order != "" {
		add(func(d *dcase) { d.Agg.Order = ""; d.Agg.Total = d.Agg.Group == "" && len(d.Agg.Distinct) == 0 })
	}
	if len(c.Inline) > 0 {
		add(func(d *dcase) { d.Inline = nil })
		for i := range c.Inline {
			if len(c.Inline) > 1 {
				add(func(d *dcase) { d.Inline = append(d.Inline[:i:i], d.Inline[i+1:]...) })
			}
		}
	}
	if c.Offset != 0 {
		add(func(d *dcase) { d.Offset = 0 })
	}
	if c.Op == dUpdate && c.Set.Kind != setCaption {
		add(func(d *dcase) { d.Set.Kind = setCaption })
	}
	for i := range c.Rows {
		if len(c.Rows) > 1 {
			add(func(d *dcase) { d.Rows = append(d.Rows[:i:i], d.Rows[i+1:]...) })
		}
	}
	if c.Many && len(c.Rows) == 1 {
		add(func(d *dcase) { d.Many = false })
	}
	for i, cl := range c.Calls {
		if cl.How != callWhere {
			add(func(d *dcase) { d.Calls[i].How = callWhere })
		}
		for _, s := range cl.C.shrinks() {
			add(func(d *dcase) { d.Calls[i].C = s })
		}
	}
	return out
}

// shrinks returns simpler conditions: a node's kids, shorter lists.
func (c cond) shrinks() []cond {
	var out []cond
	out = append(out, c.Kids...)
	if len(c.Users) > 1 && c.Kind != cRawOr {
		for i := range c.Users {
			d := c.clone()
			d.Users = append(d.Users[:i:i], d.Users[i+1:]...)
			out = append(out, d)
		}
	}
	if len(c.IDs) > 1 {
		for i := range c.IDs {
			d := c.clone()
			d.IDs = append(d.IDs[:i:i], d.IDs[i+1:]...)
			out = append(out, d)
		}
	}
	if len(c.Slugs) > 1 && c.Kind != cSlugAnd {
		for i := range c.Slugs {
			d := c.clone()
			d.Slugs = append(d.Slugs[:i:i], d.Slugs[i+1:]...)
			out = append(out, d)
		}
	}
	if c.Kind == cStruct && c.S != "" {
		d := c.clone()
		d.S = ""
		out = append(out, d)
	}
	for i, k := range c.Kids {
		for _, s := range k.shrinks() {
			d := c.clone()
			d.Kids[i] = s
			out = append(out, d)
		}
	}
	return out
}

func (c cond) clone() cond {
	d := c
	d.Users = append([]int64(nil), c.Users...)
	d.IDs = append([]int64(nil), c.IDs...)
	d.Slugs = append([]string(nil), c.Slugs...)
	d.Kids = make([]cond, len(c.Kids))
	for i, k := range c.Kids {
		d.Kids[i] = k.clone()
	}
	return d
}

func (c dcase) clone() dcase {
	d := c
	d.Select = append([]string(nil), c.Select...)
	if c.Select == nil {
		d.Select = nil
	}
	d.Omit = append([]string(nil), c.Omit...)
	if c.Omit == nil {
		d.Omit = nil
	}
	d.Rows = append([]prow(nil), c.Rows...)
	d.Inline = append([]int64(nil), c.Inline...)
	if c.Model != nil {
		m := *c.Model
		d.Model = &m
	}
	d.Agg = c.Agg.clone()
	d.Calls = make([]call, len(c.Calls))
	for i, cl := range c.Calls {
		d.Calls[i] = call{How: cl.How, C: cl.C.clone()}
	}
	return d
}

// features names what a case uses, to tell failure causes apart.
func (c dcase) features() []string {
	var out []string
	seen := map[string]bool{}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	var walk func(cond)
	walk = func(x cond) {
		switch x.Kind {
		case cRawOr, cRawOrMixed:
			add("OR inside a SQL string")
		case cKeyExpr:
			add("expression on the shard key")
		case cSub:
			add("sub-query")
		case cGroup:
			add("grouped condition with Or")
		case cStruct:
			add("struct condition")
		case cMap:
			add("map condition")
		case cClauseIn:
			add("clause.IN")
		case cSlugEq, cSlugIn, cSlugMap, cSlugStruct, cSlugClauseIn, cSlugAnd:
			add("lookup column by = or IN")
		case cSlugOr, cSlugLike, cSlugNull:
			add("lookup column in OR, LIKE or IS NULL")
		}
		for _, k := range x.Kids {
			walk(k)
		}
	}
	for _, cl := range c.Calls {
		switch cl.How {
		case callOr:
			add("Or()")
		case callNot:
			add("Not()")
		}
		walk(cl.C)
	}
	if c.Pins {
		add("Pin (a lookup column)")
	}
	if c.All {
		add("AllShards()")
	}
	if c.SkipTx {
		add("SkipDefaultTransaction")
	}
	if c.Returning {
		add("RETURNING")
	}
	if c.Model != nil {
		add("model with primary key")
	}
	if c.Order != "" {
		add("ORDER BY " + c.Order)
		if c.Select != nil && (c.Op == dFind || c.Op == dFindMap || c.Op == dFirst || c.Op == dLast) {
			for _, part := range strings.Split(c.Order, ",") {
				col := strings.Fields(part)[0]
				if !slices.Contains(c.Select, col) {
					add("ordered by a column not selected (" + col + ")")
				}
			}
		}
	}
	if c.Select != nil {
		add("Select(" + strings.Join(c.Select, ", ") + ")")
	}
	if c.Omit != nil {
		add("Omit(" + strings.Join(c.Omit, ", ") + ")")
	}
	if c.Limit != 0 || c.Offset != 0 {
		add("LIMIT/OFFSET")
	}
	if len(c.Inline) > 0 {
		add("inline primary keys")
	}
	if c.Op == dUpdate {
		switch c.Set.Kind {
		case setKey, setKeyMap:
			add("update of the shard key")
		case setID:
			add("update of the primary key")
		case setSlug, setSlugNull, setSlugMap:
			add("update of the lookup column")
		}
	}
	if len(c.Rows) > 1 {
		add("rows of several users")
	}
	if c.Agg != nil {
		add(c.Agg.feature())
	}
	if len(out) == 0 {
		add("none")
	}
	return out
}
