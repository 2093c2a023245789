// Package idtest holds invariant tests of shardkit IDs that need a real
// Postgres but no catalog: compatibility with Instagram's original
// PL/pgSQL next_id(). It has no code of its own.
//
//	go test ./internal/harness/idtest/
package idtest
