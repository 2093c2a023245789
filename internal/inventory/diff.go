package inventory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Diff is what a target lacks of a source's schema, and where the two
// differ beyond that.
type Diff struct {
	Missing []*Item      // on the source only; each carried unless Why is set
	Differ  []Difference // present on both with different definitions, or on the target only
	Reset   []StaleCopy  // present on both, differing, and brought to the source's by its DDL
}

// StaleCopy is an owner, grants or comment that differ on the target, and
// the source's item, whose DDL resets them.
type StaleCopy struct {
	Difference
	Src *Item
}

// ToCreate is what a carry runs: the missing items and the resets.
func (d Diff) ToCreate() []*Item {
	out := append([]*Item(nil), d.Missing...)
	for _, r := range d.Reset {
		out = append(out, r.Src)
	}
	return out
}

// Differences are the differences beyond the missing objects, the stale
// copies included.
func (d Diff) Differences() []Difference {
	out := append([]Difference(nil), d.Differ...)
	for _, r := range d.Reset {
		out = append(out, r.Difference)
	}
	return out
}

// Difference is an object whose definition differs between two copies of
// a shard schema, or that one copy lacks.
type Difference struct {
	Object         Object
	Source, Target string // the definitions; "" where the object is absent
}

func (d Difference) String() string {
	switch {
	case d.Source == "":
		return d.Object.String() + " is on the target only"
	case d.Target == "":
		return d.Object.String() + " is on the source only"
	}
	return fmt.Sprintf("%s differs: source %q, target %q", d.Object, d.Source, d.Target)
}

// Compare compares src with tgt. An object whose parent is missing too is
// left out of Missing: it is created with its parent.
func Compare(src, tgt *Inventory) Diff {
	var d Diff
	for _, k := range src.Order {
		s := src.Items[k]
		t, ok := tgt.Items[k]
		if !ok {
			if s.Parent != "" {
				if _, pok := tgt.Items[s.Parent]; !pok {
					if _, psrc := src.Items[s.Parent]; psrc {
						continue
					}
				}
			}
			d.Missing = append(d.Missing, s)
			continue
		}
		if s.Def != t.Def {
			df := Difference{Object: s.Obj, Source: s.Def, Target: t.Def}
			if s.Reset && s.Why == "" {
				d.Reset = append(d.Reset, StaleCopy{df, s})
				continue
			}
			d.Differ = append(d.Differ, df)
		}
	}
	for _, k := range tgt.Order {
		if _, ok := src.Items[k]; !ok {
			d.Differ = append(d.Differ, Difference{Object: tgt.Items[k].Obj, Target: tgt.Items[k].Def})
		}
	}
	return d
}

// Carriable splits missing items into those to create now (the late ones
// when late, else the others) and those that cannot be carried.
func Carriable(missing []*Item, late bool) (create, refused []*Item) {
	for _, it := range missing {
		switch {
		case it.Why != "":
			refused = append(refused, it)
		case it.DDL == "":
			// Comes with an object the target has: nothing to run, and the
			// comparison after the carry reports it if it is still missing.
		case it.Late == late || late:
			create = append(create, it)
		}
	}
	return create, refused
}

// Failure is an item that could not be created on the target.
type Failure struct {
	Item *Item
	Err  error
}

// CreateMissing creates items on the server of tx, in passes: an item
// that fails (it needs one not created yet) is tried again after the
// others, until a pass creates nothing. Each runs under a savepoint, so
// the failures leave tx usable; they are returned.
func CreateMissing(ctx context.Context, tx pgx.Tx, items []*Item) ([]Failure, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog; SET LOCAL check_function_bodies = off",
		pgx.QueryExecModeSimpleProtocol); err != nil {
		return nil, err
	}
	pending := items
	for len(pending) > 0 {
		var next []Failure
		for _, it := range pending {
			if _, err := tx.Exec(ctx, "SAVEPOINT shardkit_carry;\n"+it.DDL, pgx.QueryExecModeSimpleProtocol); err != nil {
				if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT shardkit_carry"); rerr != nil {
					return nil, rerr
				}
				next = append(next, Failure{it, err})
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
			pending = append(pending, f.Item)
		}
	}
	return nil, nil
}
