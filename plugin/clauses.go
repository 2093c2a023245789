package plugin

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

type scopeKind uint8

const (
	scopeKey scopeKind = iota + 1
	scopeID
	scopeAll
)

// scope is an explicit routing choice made by the caller.
type scope struct {
	kind scopeKind
	key  any   // scopeKey: the shard key (integer or string)
	id   int64 // scopeID
}

type pinKey struct{}

// Shard scopes a statement, or a transaction begun from it, to the logical
// shard of a shard key (an integer or a string, as on the model's
// shard:"key" field):
//
//	db.Clauses(plugin.Shard(userID)).Transaction(func(tx *gorm.DB) error { … })
func Shard(key any) clause.Expression { return scope{kind: scopeKey, key: key} }

// ShardOfID scopes a statement, or a transaction begun from it, to the
// logical shard stored in an ID.
func ShardOfID(id int64) clause.Expression { return scope{kind: scopeID, id: id} }

// AllShards lets a statement run on every logical shard (a read queries
// the servers at once, each server's schemas in turn), with the results
// merged (ordered by the ORDER BY columns when they are model fields).
// Use it for rare, deliberate scans only.
func AllShards() clause.Expression { return scope{kind: scopeAll} }

// ModifyStatement records the scope on the statement; Shard and ShardOfID
// also put it in the statement's context so that a transaction begun from
// the statement is pinned to that shard.
func (s scope) ModifyStatement(stmt *gorm.Statement) {
	stmt.Clauses[scopeName] = clause.Clause{Expression: s}
	if s.kind != scopeAll {
		ctx := stmt.Context
		if ctx == nil {
			ctx = context.Background()
		}
		stmt.Context = context.WithValue(ctx, pinKey{}, s)
	}
}

// Build is part of clause.Expression; a scope adds no SQL.
func (scope) Build(clause.Builder) {}

func scopeOf(stmt *gorm.Statement) (scope, bool) {
	c, ok := stmt.Clauses[scopeName]
	if !ok {
		return scope{}, false
	}
	s, ok := c.Expression.(scope)
	return s, ok
}
