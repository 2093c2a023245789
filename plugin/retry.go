package plugin

import "errors"

// Retryable reports whether err is transient: the same statement or
// transaction may succeed when run again shortly, because a shard was
// fenced for a move (ErrShardFenced), moved under a transaction
// (ErrShardMoved), or its server could not be reached
// (ErrServerUnavailable). Errors of the statement itself (a missing shard
// key, SQL that cannot be routed, a constraint violation) and
// configuration errors are not retryable: running them again gives the
// same answer.
//
// Retryable says nothing about whether a failed write was applied. A
// fenced or moved write was refused before it ran. A write whose
// connection was cut may have committed: pgconn.SafeToRetry(err) reports
// the cases where the statement was surely never sent. An insert whose ID
// the plugin made in Go is safe to run again either way: if the first
// attempt committed, the second fails on the primary key instead of
// writing the row twice.
func Retryable(err error) bool {
	return errors.Is(err, ErrShardFenced) || errors.Is(err, ErrShardMoved) || errors.Is(err, ErrServerUnavailable)
}
