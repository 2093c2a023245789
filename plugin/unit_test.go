package plugin

import (
	"reflect"
	"strings"
	"testing"

	"gorm.io/gorm"
)

func TestShardSetAnd(t *testing.T) {
	set := func(xs ...int) shardSet { return shardSet{known: true, list: xs} }
	tests := []struct {
		name string
		a, b shardSet
		want shardSet
	}{
		{"unknown and one", shardSet{}, one(3), one(3)},
		{"one and unknown", one(3), shardSet{}, one(3)},
		{"same", one(3), one(3), one(3)},
		{"different", one(3), one(4), shardSet{known: true}},
		{"list and one inside", set(1, 3, 5), one(3), set(3)},
		{"list and list", set(1, 3, 5), set(3, 5, 7), set(3, 5)},
		{"all and one", shardSet{known: true, all: true}, one(2), one(2)},
		{"all and unknown", shardSet{known: true, all: true}, shardSet{}, shardSet{known: true, all: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.and(tt.b)
			if got.known != tt.want.known || got.all != tt.want.all || !reflect.DeepEqual(append([]int{}, got.list...), append([]int{}, tt.want.list...)) {
				t.Fatalf("and = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestShardSetOr(t *testing.T) {
	set := func(xs ...int) shardSet { return shardSet{known: true, list: xs} }
	tests := []struct {
		name string
		a, b shardSet
		want shardSet
	}{
		{"unknown or one", shardSet{}, one(3), shardSet{}},
		{"one or unknown", one(3), shardSet{}, shardSet{}},
		{"one or other", one(3), one(1), set(1, 3)},
		{"none or one", none, one(2), one(2)},
		{"lists", set(1, 5), set(3, 5, 7), set(1, 3, 5, 7)},
		{"all or one", shardSet{known: true, all: true}, one(2), shardSet{known: true, all: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.a.or(tt.b)
			if got.known != tt.want.known || got.all != tt.want.all || !reflect.DeepEqual(append([]int{}, got.list...), append([]int{}, tt.want.list...)) {
				t.Fatalf("or = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAddKeepsSortedAndDoesNotWriteSingles(t *testing.T) {
	l := one(5).list
	l2 := add(l, 2)
	l2 = add(l2, 9)
	l2 = add(l2, 5)
	if !reflect.DeepEqual(l2, []int{2, 5, 9}) || singles[5] != 5 || singles[6] != 6 {
		t.Fatalf("list %v, singles %v", l2, singles[4:8])
	}
}

// TestDryRunQuotesSchemaQualifiedTable checks the SQL GORM builds for a
// routed statement: the table is quoted part by part.
func TestDryRunQuotesSchemaQualifiedTable(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64})
	dry := e.db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	var p Photo
	stmt := dry.Where("user_id = ?", 42).Find(&p).Statement
	if sql := stmt.SQL.String(); !strings.Contains(sql, `FROM "shard_0042"."photos"`) {
		t.Fatalf("SQL = %s", sql)
	}
	stmt = dry.Create(&Photo{UserID: 42}).Statement
	if sql := stmt.SQL.String(); !strings.HasPrefix(sql, `INSERT INTO "shard_0042"."photos"`) {
		t.Fatalf("SQL = %s", sql)
	}
	e.defaultUntouched(t)
}
