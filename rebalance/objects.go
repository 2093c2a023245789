package rebalance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/inventory"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// A move carries what a shard schema holds beyond the per-shard SQL
// (internal/inventory reads it, generates its DDL and compares copies):
// the preflight rehearses the carry on the target and refuses what it
// cannot carry, before anything changes; the move carries it; Verify
// compares both copies object by object.

// SchemaObject is one object of a shard schema.
type SchemaObject struct {
	Kind  string // "table", "column", "sequence", "index", "constraint", "view", "function", "trigger", …
	Name  string // name in the schema; a function's with its argument types
	Table string // the table of a column, index, constraint or trigger; "" otherwise
}

func (o SchemaObject) String() string { return inventory.Object(o).String() }

// carry creates on the target the objects of the source's schema that the
// target lacks: before the copy (late false) all but the secondary
// indexes, after it (late true) the rest, and then the two schemas must
// match object for object (else errCannotCarry, naming the differences).
// It is idempotent: what the target has already is left alone. srcInv, if
// not nil, is the source's inventory read earlier in the same step (the
// source's schema does not change during a move), else it is read here.
func carry(ctx context.Context, srcInv *inventory.Inventory, src, tgt *pgxpool.Pool, schema, role string, late bool,
	then func(ctx context.Context, tx pgx.Tx) error) error {
	var err error
	if srcInv == nil {
		if srcInv, err = inventory.Read(ctx, src, schema, barrierName, role); err != nil {
			return err
		}
	}
	err = pgx.BeginFunc(ctx, tgt, func(tx pgx.Tx) error {
		tgtInv, err := inventory.ReadIn(ctx, tx, schema, barrierName, role)
		if err != nil {
			return err
		}
		create, refused := inventory.Carriable(inventory.Compare(srcInv, tgtInv).ToCreate(), late)
		if len(refused) > 0 {
			return fmt.Errorf("%w: %s", errCannotCarry, objectList(refused, nil))
		}
		failures, err := inventory.CreateMissing(ctx, tx, create)
		if err != nil {
			return err
		}
		if len(failures) > 0 {
			its := make([]*inventory.Item, len(failures))
			errs := make([]error, len(failures))
			for i, f := range failures {
				its[i], errs[i] = f.Item, f.Err
			}
			return fmt.Errorf("%w: %s", errCannotCarry, objectList(its, errs))
		}
		if then != nil {
			return then(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("carry the objects of %s to the target: %w", schema, err)
	}
	if !late {
		return nil
	}
	return sameObjects(ctx, srcInv, src, tgt, schema, role)
}

// sameObjects compares the inventories of a schema on two servers; srcInv,
// if not nil, stands for the source's. The application role's privileges
// are left out: they follow the shard's home (grants.go).
func sameObjects(ctx context.Context, srcInv *inventory.Inventory, src, tgt *pgxpool.Pool, schema, role string) error {
	a, b, err := inventory.ReadBoth(ctx, srcInv, src, tgt, schema, barrierName, role)
	if err != nil {
		return err
	}
	d := inventory.Compare(a, b)
	var diffs []string
	for _, it := range d.Missing {
		diffs = append(diffs, it.Obj.String()+" is on the source only")
	}
	for _, df := range d.Differences() {
		diffs = append(diffs, df.String())
	}
	if len(diffs) > 0 {
		return &objectsError{Schema: schema, Differences: diffs}
	}
	return nil
}

// objectsError reports two copies of a shard schema whose objects differ
// (tables, columns, indexes, constraints, views, functions, triggers).
type objectsError struct {
	Schema      string
	Differences []string
}

func (e *objectsError) Error() string {
	return fmt.Sprintf("shardkit: verify %s: %v: objects differ: %s; do not complete the move; roll it back or resume it",
		e.Schema, ErrMismatch, strings.Join(e.Differences, "; "))
}

// Unwrap returns ErrMismatch.
func (e *objectsError) Unwrap() error { return ErrMismatch }

func objectList(items []*inventory.Item, errs []error) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.Obj.String()
		if it.Why != "" {
			parts[i] += " (" + it.Why + ")"
		}
		if errs != nil {
			parts[i] += " (" + pgMessage(errs[i]) + ")"
		}
	}
	return strings.Join(parts, "; ")
}

// rehearse creates the shard's schema on the target as the move would,
// per-shard SQL and carried objects, inside a transaction it rolls back,
// and compares the result with the source.
func (mv *Mover) rehearse(ctx context.Context, snap *router.Snapshot, tgt *pgxpool.Pool, srcInv *inventory.Inventory, r *Report) error {
	tx, err := tgt.Begin(ctx)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := shardschema.ApplyShard(ctx, tx, snap.Layout, r.Shard, mv.cfg.ShardSQL, shardschema.ApplyOptions{}); err != nil {
		return fmt.Errorf("shardkit: server %s: rehearse creating %s from the per-shard SQL: %w", r.Target, r.Schema, err)
	}
	ref, err := inventory.ReadIn(ctx, tx, r.Schema, barrierName, r.appRole)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
	}
	d := inventory.Compare(srcInv, ref)
	reported := map[string]bool{}
	create, refused := inventory.Carriable(d.ToCreate(), true)
	for _, it := range refused {
		reported[it.Key()] = true
		r.fail(checkObjects, r.Source, it.Obj.String()+" in "+r.Schema, it.Why, errCannotCarry)
	}
	for _, df := range d.Differ {
		reported[inventory.Key(df.Object)] = true
		r.fail(checkObjects, r.Source, df.Object.String()+" in "+r.Schema, drift(df), errSchemaDrift)
	}
	r.Carried = listCarried(create)
	sort.SliceStable(r.Carried, func(i, j int) bool { return r.Carried[i].String() < r.Carried[j].String() })
	failures, err := inventory.CreateMissing(ctx, tx, create)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
	}
	for _, f := range failures {
		reported[f.Item.Key()] = true
		r.fail(checkObjects, r.Target, f.Item.Obj.String()+" in "+r.Schema, "creating it failed: "+pgMessage(f.Err), errCannotCarry)
	}
	after, err := inventory.ReadIn(ctx, tx, r.Schema, barrierName, r.appRole)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
	}
	d = inventory.Compare(srcInv, after)
	for _, it := range d.Missing {
		if !reported[it.Key()] {
			r.fail(checkObjects, r.Target, it.Obj.String()+" in "+r.Schema, "not created by the carry", errCannotCarry)
		}
	}
	for _, df := range d.Differences() {
		if !reported[inventory.Key(df.Object)] {
			r.fail(checkObjects, r.Target, df.Object.String()+" in "+r.Schema, "the carried copy differs: "+df.String(), errCannotCarry)
		}
	}
	r.markExtraTables()
	if !r.failed(checkObjects) {
		r.pass(checkObjects, "", fmt.Sprintf("%d made by the per-shard SQL, %d carried", len(ref.Items), len(r.Carried)))
	}
	return nil
}

// objectsWithoutRehearsal fills Carried with the objects of the source
// that are not shardkit's own, by kind only (no per-shard SQL to compare
// with): used when the target's schema is in the way.
func (r *Report) objectsWithoutRehearsal(srcInv *inventory.Inventory) {
	for _, k := range srcInv.Order {
		if it := srcInv.Items[k]; it.Why != "" {
			r.fail(checkObjects, r.Source, it.Obj.String()+" in "+r.Schema, it.Why, errCannotCarry)
		}
	}
}

func (r *Report) markExtraTables() {
	extra := map[string]bool{}
	for _, o := range r.Carried {
		if o.Kind == "table" {
			extra[o.Name] = true
		}
	}
	for i := range r.Tables {
		r.Tables[i].Extra = extra[r.Tables[i].Name]
	}
}

// drift says how a source object differs from what the per-shard SQL
// makes (Target is the per-shard SQL's).
func drift(d inventory.Difference) string {
	switch {
	case d.Source == "":
		return "made by the per-shard SQL but missing on the source"
	case d.Target == "":
		return "on the source only"
	}
	return fmt.Sprintf("differs from the per-shard SQL's: source %q, per-shard SQL %q", d.Source, d.Target)
}

// pgMessage is a server error's message (and detail), or the error's text.
func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Detail != "" {
			return pe.Message + " (" + pe.Detail + ")"
		}
		return pe.Message
	}
	return err.Error()
}

// listCarried lists the objects to carry, leaving out the replica identity
// of a carried table and the ownership of a carried sequence (they go with
// it).
func listCarried(create []*inventory.Item) []SchemaObject {
	made := map[string]bool{}
	for _, it := range create {
		made[it.Obj.Kind+" "+it.Obj.Name] = true
	}
	var out []SchemaObject
	for _, it := range create {
		switch {
		case it.Obj.Kind == "replica identity" && made["table "+it.Obj.Name],
			it.Obj.Kind == "sequence ownership" && made["sequence "+it.Obj.Name]:
			continue
		}
		out = append(out, SchemaObject(it.Obj))
	}
	return out
}
