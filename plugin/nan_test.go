package plugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// Score has a float column, for orderings that must follow Postgres's:
// NaN above every number, NULL last ascending and first descending.
type Score struct {
	ID     int64
	UserID int64 `shard:"key"`
	Value  *float64
}

const scoresDDL = `CREATE TABLE %s (id bigint PRIMARY KEY %s, user_id bigint NOT NULL, value double precision)`

// shardTables creates table in every shard of an env before its router
// and plugin are made, from ddl: a format with the table's name and its
// id column's DEFAULT (the shard's next_id) as its two verbs.
func shardTables(t *testing.T, ddl, table string) func(*env) {
	return func(e *env) {
		ctx := context.Background()
		snap, err := e.cat.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, pl := range snap.Placements() {
			conn := pgtest.Connect(t, e.dsn[pl.Server])
			if _, err := conn.Exec(ctx, fmt.Sprintf(ddl, pgx.Identifier{pl.Schema, table}.Sanitize(), "DEFAULT "+pgx.Identifier{pl.Schema, "next_id"}.Sanitize()+"()")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFloatOrderAcrossShardsMatchesOneTable orders a float column holding
// NaN, infinities, numbers and NULL across shards and compares the rows,
// and their order, with plain GORM on one table holding the same rows.
func TestFloatOrderAcrossShardsMatchesOneTable(t *testing.T) {
	e := newEnv(t, envOpts{models: []any{&Score{}}, before: shardTables(t, scoresDDL, "scores")})
	plainDSN := pgtest.NewDatabase(t, 0)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Exec(fmt.Sprintf(scoresDDL, "scores", "")).Error; err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	values := []*float64{f(math.NaN()), f(1.5), nil, f(math.Inf(1)), f(-2), f(math.NaN()), f(math.Inf(-1)), f(0), nil, f(1.5), f(7)}
	for i, v := range values {
		s := Score{UserID: int64(i + 1), Value: v}
		if err := e.db.Create(&s).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Create(&Score{ID: s.ID, UserID: s.UserID, Value: v}).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, order := range []string{"value", "value DESC", "value, id", "value DESC, id DESC", "id, value"} {
		for _, limit := range []int{-1, 4} {
			t.Run(fmt.Sprintf("%s/limit %d", order, limit), func(t *testing.T) {
				var got, want []Score
				if err := e.db.Clauses(AllShards()).Order(order).Limit(limit).Find(&got).Error; err != nil {
					t.Fatal(err)
				}
				if err := plain.Order(order).Limit(limit).Find(&want).Error; err != nil {
					t.Fatal(err)
				}
				if g, w := scoreValues(got), scoreValues(want); g != w {
					t.Fatalf("ORDER BY %s across %d shards:\n got %s\nwant %s (one table)", order, e.shards, g, w)
				}
			})
		}
	}
	// An explicit NULLS FIRST/LAST orders by hidden values each shard
	// selects (hiddenOrderKeys), compared as Postgres does; USING is
	// refused, never guessed.
	for _, order := range []string{"value NULLS FIRST", "value DESC NULLS LAST", "value ASC NULLS LAST, id"} {
		var got, want []Score
		if err := e.db.Clauses(AllShards()).Order(order).Find(&got).Error; err != nil {
			t.Fatalf("ORDER BY %s across shards: %v", order, err)
		}
		if err := plain.Order(order).Find(&want).Error; err != nil {
			t.Fatal(err)
		}
		if g, w := scoreValues(got), scoreValues(want); g != w {
			t.Fatalf("ORDER BY %s across %d shards:\n got %s\nwant %s (one table)", order, e.shards, g, w)
		}
	}
	var rows []Score
	if err := e.db.Clauses(AllShards()).Order("value USING <").Find(&rows).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("ORDER BY value USING < across shards: err = %v, want ErrUnroutableSQL", err)
	}
}

// scoreValues prints the values in order; rows whose values tie may come
// in any order, so only the values are compared.
func scoreValues(rows []Score) string {
	out := ""
	for _, r := range rows {
		if r.Value == nil {
			out += " NULL"
		} else {
			out += fmt.Sprintf(" %v", *r.Value)
		}
	}
	return out
}
