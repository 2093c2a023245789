package plugin

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/pgtest"
)

// plainMembersDDL is the members table of the plain, unsharded oracle:
// the lookup columns are plain unique columns there.
const plainMembersDDL = `CREATE TABLE members (
    id       bigint PRIMARY KEY,
    username text   NOT NULL UNIQUE,
    email    text   UNIQUE,
    name     text   NOT NULL DEFAULT ''
)`

// lookupRead is one read shape, run alike on the sharded and the plain
// database; it returns what the read found, in a comparable form.
type lookupRead struct {
	name string
	run  func(db *gorm.DB, v []string) (any, error)
}

func sortedMembers(ms []Member) []Member {
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	return ms
}

func findMembers(q *gorm.DB) (any, error) {
	var ms []Member
	err := q.Find(&ms).Error
	return sortedMembers(ms), err
}

func oneMember(err error, m Member) (any, error) {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "not found", nil
	}
	return m, err
}

var lookupReads = []lookupRead{
	{"First", func(db *gorm.DB, v []string) (any, error) {
		var m Member
		return oneMember(db.First(&m, "username = ?", v[0]).Error, m)
	}},
	{"Take struct", func(db *gorm.DB, v []string) (any, error) {
		var m Member
		return oneMember(db.Where(&Member{Username: v[0]}).Take(&m).Error, m)
	}},
	{"Find map", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where(map[string]any{"username": v[0]}))
	}},
	{"Find =", func(db *gorm.DB, v []string) (any, error) { return findMembers(db.Where("username = ?", v[0])) }},
	{"Find qualified", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where("members.username = ?", v[0]))
	}},
	{"Find IN", func(db *gorm.DB, v []string) (any, error) { return findMembers(db.Where("username IN ?", v)) }},
	{"Find IN clause", func(db *gorm.DB, v []string) (any, error) {
		vals := make([]any, len(v))
		for i := range v {
			vals[i] = v[i]
		}
		return findMembers(db.Where(clause.IN{Column: clause.Column{Name: "username"}, Values: vals}))
	}},
	{"Find AND in one string", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where("username = ? AND name <> ?", v[0], "nobody"))
	}},
	{"Find groups", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where("(username IN (?, ?)) AND (name LIKE ?)", v[0], v[1], "name%"))
	}},
	{"Find chained", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where("name LIKE ?", "%").Where("username = ?", v[0]).Where("email IS NULL"))
	}},
	{"Find email", func(db *gorm.DB, v []string) (any, error) {
		return findMembers(db.Where("email = ?", v[0]+"@example.com"))
	}},
	{"Count IN", func(db *gorm.DB, v []string) (any, error) {
		var n int64
		err := db.Model(&Member{}).Where("username IN ?", v).Count(&n).Error
		return n, err
	}},
	{"Pluck IN ordered", func(db *gorm.DB, v []string) (any, error) {
		var names []string
		err := db.Model(&Member{}).Where("username IN ?", v).Order("username").Pluck("username", &names).Error
		return names, err
	}},
}

// Lookup-routed reads return what the same GORM read returns on one
// unsharded table with the same rows, including values held only by
// orphaned lookup rows and values nobody holds.
func TestLookupReadsMatchPlainGORM(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	sharded := e.db.Session(&gormSkipTx)
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, plainMembersDDL)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d, err := plain.DB(); err == nil {
			_ = d.Close()
		}
	})
	rng := rand.New(rand.NewPCG(7, 7))
	var pool []string
	for i := range 40 {
		name := fmt.Sprintf("m%02d", i)
		pool = append(pool, name)
		m := &Member{Username: name, Name: "name " + name}
		if i%3 == 0 {
			mail := name + "@example.com"
			m.Email = &mail
		}
		if err := sharded.Clauses(Shard(rng.Int64N(1000))).Create(m).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Create(m).Error; err != nil {
			t.Fatal(err)
		}
	}
	// Orphans on the sharded side only: a value with no owner row, and a
	// value whose owner holds another one.
	snap := e.r.Snapshot()
	var some Member
	if err := sharded.First(&some, "username = ?", "m05").Error; err != nil {
		t.Fatal(err)
	}
	for value, owner := range map[string]int64{"ghost": some.ID + 1, "stale": some.ID} {
		s, _ := LookupShard(value, e.shards)
		pl, _ := snap.Placement(s)
		e.rawExec(t, pl.Server, "INSERT INTO "+pgx.Identifier{pl.Schema, "members_username_lookup"}.Sanitize()+" VALUES ($1, $2)", value, owner)
	}
	pool = append(pool, "ghost", "stale", "nobody", "")
	for i := range 400 {
		r := lookupReads[rng.IntN(len(lookupReads))]
		v := make([]string, 1+rng.IntN(3))
		for j := range v {
			v[j] = pool[rng.IntN(len(pool))]
		}
		if len(v) < 2 {
			v = append(v, pool[rng.IntN(len(pool))])
		}
		got, gerr := r.run(sharded.WithContext(ctx), v)
		want, werr := r.run(plain.WithContext(ctx), v)
		if gerr != nil || werr != nil {
			t.Fatalf("case %d %s %q: sharded error %v, plain error %v", i, r.name, v, gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d %s %q:\nsharded %+v\nplain   %+v", i, r.name, v, got, want)
		}
	}
	e.defaultUntouched(t)
}
