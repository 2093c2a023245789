package plugin

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// TestCrossShardJoinsOrderAndCColumnOnICU checks, on databases whose
// default collation is ICU, each read against plain GORM on one table:
// a join ordered by an expression and the model's id (the merge's hidden
// key for id is qualified by the model's table: the joined table has an
// id too), and a column of COLLATE "C" compared and ordered as Postgres
// does (in its own collation, not the database's). An expression over
// the joined table's text is refused, typed: the plugin does not know
// which collation Postgres derives for it.
func TestCrossShardJoinsOrderAndCColumnOnICU(t *testing.T) {
	te := newTypedEnv(t, func(o *envOpts) {
		o.dsnOf = func(server string) string { return icuDatabase(t, map[string]int{"a": 0, "b": 1}[server]) }
	})
	tags := func(db *gorm.DB) (any, error) {
		var rows []ThingTag
		err := db.Joins("Thing").Order("cardinality(ia)").Order("thing_tags.id desc").Find(&rows).Error
		for i := range rows {
			rows[i].Thing = nil // compared by the joined key alone
		}
		return rows, err
	}
	tagsPage := func(db *gorm.DB) (any, error) {
		var rows []ThingTag
		err := db.Joins("Thing").Order("coalesce(i4, 0) desc").Order("thing_tags.id").Limit(-1).Offset(1).Find(&rows).Error
		for i := range rows {
			rows[i].Thing = nil
		}
		return rows, err
	}
	minMax := func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := db.Model(&Thing{}).Where("user_id IN ?", []int64{1037, 1387, 1481, 1703}).Select("min(tc) AS lo, max(tc) AS hi, count(tc) AS n").Find(&rows).Error
		return mapsText(rows), err
	}
	distinct := func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := db.Model(&Thing{}).Distinct("tc").Order("tc").Find(&rows).Error
		return mapsText(rows), err
	}
	for _, c := range []struct {
		name string
		read func(*gorm.DB) (any, error)
	}{{"joins ordered by expression and id", tags}, {"joins Limit(-1) Offset", tagsPage}, {"min and max of a C column", minMax}, {"distinct C column ordered", distinct}} {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.read(te.plain)
			if err != nil {
				t.Fatalf("plain GORM: %v", err)
			}
			got, err := c.read(te.e.db.Clauses(AllShards()))
			if err != nil {
				t.Fatalf("across shards: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("across shards:\n%v\nplain GORM:\n%v", got, want)
			}
		})
	}
	t.Run("expression over the joined table's text", func(t *testing.T) {
		var rows []ThingTag
		err := te.e.db.Clauses(AllShards()).Joins("Thing").Order("tc || '' desc").Order("thing_tags.id").Find(&rows).Error
		if !errors.Is(err, ErrUnroutableSQL) {
			t.Fatalf("err = %v, want ErrUnroutableSQL", err)
		}
	})
}

// mapsText is rows read into maps as text, pointers followed.
func mapsText(rows []map[string]any) string {
	var out []string
	for _, r := range rows {
		keys := slices.Sorted(maps.Keys(r))
		var kv []string
		for _, k := range keys {
			v := reflect.ValueOf(r[k])
			for v.IsValid() && v.Kind() == reflect.Pointer && !v.IsNil() {
				v = v.Elem()
			}
			if !v.IsValid() || v.Kind() == reflect.Pointer {
				kv = append(kv, k+"=NULL")
				continue
			}
			kv = append(kv, fmt.Sprintf("%s=%v", k, v.Interface()))
		}
		out = append(out, strings.Join(kv, " "))
	}
	return strings.Join(out, "; ")
}
