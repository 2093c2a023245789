package plugin

import (
	"reflect"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// A Create, Update or Delete of one shard that is the only statement of
// GORM's own transaction runs without it, as under SkipDefaultTransaction:
// one statement is atomic on its own, and the transaction's BEGIN and
// COMMIT are two round trips of the three the write costs, and a third of
// its server's CPU. GORM's transaction begins lazily on the plugin's
// connection (shardTx), so it is still empty when the write is routed if
// nothing ran before it (a Before hook's statements, the rows a
// belongs-to association saves first); the write goes alone only if
// nothing can run after it either (alone): no After hook, no
// association left to save after it, no lookup column (whose rows are
// kept beside the write), no callback in the chain but GORM's own and the
// plugin's. Otherwise the transaction begins as GORM's would.

// aloneTx is the statement transaction of a write that runs alone, kept
// on its statement (aloneName) until GORM commits it.
type aloneTx shardTx

// Build is part of clause.Expression; it adds no SQL.
func (*aloneTx) Build(clause.Builder) {}

// alone reports whether a one-shard write of kind o, routed while its
// statement's transaction t has run nothing, is the only statement that
// transaction would run.
func (p *Plugin) alone(db *gorm.DB, o op, m *model, t *shardTx) bool {
	if t == nil || !t.statement || t.atomic || len(m.lookups) > 0 || !t.empty() {
		return false
	}
	stmt := db.Statement
	s := stmt.Schema
	if s == nil || len(s.Relationships.EmbeddedRelations) > 0 {
		return false
	}
	var proc any
	switch o {
	case opCreate:
		if !stmt.SkipHooks && (s.AfterCreate || s.AfterSave) {
			return false
		}
		proc = db.Callback().Create()
	case opUpdate:
		if !stmt.SkipHooks && (s.AfterUpdate || s.AfterSave) {
			return false
		}
		proc = db.Callback().Update()
	case opDelete:
		if !stmt.SkipHooks && s.AfterDelete {
			return false
		}
		return onlyOwnCallbacks(db.Callback().Delete(), deleteChain)
	default:
		return false
	}
	chain := createChain
	if o == opUpdate {
		chain = updateChain
		if !noAssociationsIn(stmt, s, stmt.Dest) {
			return false
		}
	}
	return noAssociationsIn(stmt, s, stmt.ReflectValue) && onlyOwnCallbacks(proc, chain)
}

// saveAfter are the kinds of association GORM saves after the statement
// that writes the row (gorm:save_after_associations).
func saveAfter(s *schema.Schema) []*schema.Relationship {
	r := &s.Relationships
	if len(r.HasOne)+len(r.HasMany)+len(r.Many2Many) == 0 {
		return nil
	}
	out := make([]*schema.Relationship, 0, len(r.HasOne)+len(r.HasMany)+len(r.Many2Many))
	out = append(out, r.HasOne...)
	out = append(out, r.HasMany...)
	return append(out, r.Many2Many...)
}

// noAssociationsIn reports whether v (a row, a slice of rows, a pointer
// to either, or an Update's map of assignments) holds no association
// that GORM would save after the row's statement. A value of another
// type might: it reports false.
func noAssociationsIn(stmt *gorm.Statement, s *schema.Schema, v any) bool {
	rels := saveAfter(s)
	if len(rels) == 0 {
		return true
	}
	switch d := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, rel := range rels {
			if _, ok := d[rel.Name]; ok {
				return false
			}
		}
		return true
	case reflect.Value:
		return noAssociationsInValue(stmt, s, rels, d)
	}
	return noAssociationsInValue(stmt, s, rels, reflect.ValueOf(v))
}

func noAssociationsInValue(stmt *gorm.Statement, s *schema.Schema, rels []*schema.Relationship, rv reflect.Value) bool {
	rv = reflect.Indirect(rv)
	switch {
	case !rv.IsValid():
		return true
	case rv.Kind() == reflect.Struct:
		if rv.Type() != s.ModelType {
			return false
		}
		for _, rel := range rels {
			if _, zero := rel.Field.ValueOf(stmt.Context, rv); !zero {
				return false
			}
		}
		return true
	case rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array:
		for i := range rv.Len() {
			if !noAssociationsInValue(stmt, s, rels, rv.Index(i)) {
				return false
			}
		}
		return true
	}
	return false
}

// The callbacks of GORM's own chains, by the names it registers them
// under; the plugin's are named shardkit:….
var (
	createChain = ownNames("gorm:begin_transaction", "gorm:before_create", "gorm:save_before_associations", "gorm:create",
		"gorm:save_after_associations", "gorm:after_create", "gorm:commit_or_rollback_transaction")
	updateChain = ownNames("gorm:begin_transaction", "gorm:setup_reflect_value", "gorm:before_update", "gorm:save_before_associations",
		"gorm:update", "gorm:save_after_associations", "gorm:after_update", "gorm:commit_or_rollback_transaction")
	deleteChain = ownNames("gorm:begin_transaction", "gorm:before_delete", "gorm:delete_before_associations", "gorm:delete",
		"gorm:after_delete", "gorm:commit_or_rollback_transaction")
	// replacedByPlugin are the callbacks of GORM's the plugin replaces
	// (registerCallbacks): a replacement of another is someone else's.
	replacedByPlugin = ownNames("gorm:begin_transaction", "gorm:commit_or_rollback_transaction", "gorm:create", "gorm:update", "gorm:delete")
)

func ownNames(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// callbackFields are the indexes of the fields of GORM's processor and
// callback types that onlyOwnCallbacks reads, found once from the type of
// the first processor met; ok is false when GORM's types lack them
// (another version of GORM): every write then keeps its transaction.
type callbackFields struct {
	proc                             reflect.Type
	callbacks, name, remove, replace []int
	ok                               bool
}

var (
	callbackFieldsOnce sync.Once
	callbackFieldsOf   callbackFields
)

func findCallbackFields(pt reflect.Type) (f callbackFields) {
	f.proc = pt
	if pt.Kind() != reflect.Pointer || pt.Elem().Kind() != reflect.Struct {
		return f
	}
	cs, ok := pt.Elem().FieldByName("callbacks")
	if !ok || cs.Type.Kind() != reflect.Slice || cs.Type.Elem().Kind() != reflect.Pointer || cs.Type.Elem().Elem().Kind() != reflect.Struct {
		return f
	}
	ct := cs.Type.Elem().Elem()
	name, ok1 := ct.FieldByName("name")
	remove, ok2 := ct.FieldByName("remove")
	replace, ok3 := ct.FieldByName("replace")
	if !ok1 || !ok2 || !ok3 || name.Type.Kind() != reflect.String || remove.Type.Kind() != reflect.Bool || replace.Type.Kind() != reflect.Bool {
		return f
	}
	f.callbacks, f.name, f.remove, f.replace, f.ok = cs.Index, name.Index, remove.Index, replace.Index, true
	return f
}

// onlyOwnCallbacks reports whether the callbacks registered on proc (a
// GORM processor: db.Callback().Create()…) are GORM's own of its chain
// and the plugin's. GORM lists them only in an unexported field, read
// here by reflection, which reads and never calls; a GORM whose types
// differ reads as another's callbacks.
func onlyOwnCallbacks(proc any, chain map[string]bool) bool {
	pv := reflect.ValueOf(proc)
	callbackFieldsOnce.Do(func() { callbackFieldsOf = findCallbackFields(pv.Type()) })
	f := &callbackFieldsOf
	if !f.ok || pv.Type() != f.proc || pv.IsNil() {
		return false
	}
	cs := pv.Elem().FieldByIndex(f.callbacks)
	for i := range cs.Len() {
		c := cs.Index(i)
		if c.IsNil() {
			return false
		}
		c = c.Elem()
		name := c.FieldByIndex(f.name).String()
		switch {
		case c.FieldByIndex(f.remove).Bool():
		case strings.HasPrefix(name, "shardkit:"):
		case c.FieldByIndex(f.replace).Bool() && !replacedByPlugin[name]:
			return false
		case !chain[name]:
			return false
		}
	}
	return true
}
