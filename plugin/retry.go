package plugin

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports whether err is transient: the same statement or
// transaction may succeed when run again shortly. It is true when
//
//   - a shard was fenced for a move (ErrShardFenced) or moved under a
//     transaction (ErrShardMoved);
//   - the server could not be reached or went away (ErrServerUnavailable,
//     a *ServerError: connection refused or cut, the driver's "conn
//     closed", SQLSTATE class 08, 57P01 admin_shutdown, 57P02
//     crash_shutdown, 57P03 cannot_connect_now), or did not answer within
//     StatementTimeout;
//   - the server was busy: no connection before the caller's deadline
//     (ErrServerBusy), out of lock space (ErrServerLockSpace), out of
//     connections (53300), or it ended the statement at its
//     statement_timeout (57014);
//   - the server is read-only (25006 read_only_sql_transaction: a standby,
//     or a primary being failed over);
//   - the transaction conflicted with another (40001
//     serialization_failure, 40P01 deadlock_detected), or an atomic
//     transaction rolled back at commit (ErrAtomicCommit).
//
// Errors of the statement itself (a missing shard key, SQL that cannot be
// routed, a syntax error, a constraint violation, no privilege),
// configuration errors (ErrServerConfig), an atomic commit in doubt
// (ErrCommitInDoubt: read before retrying) and the end of the caller's
// own context are not retryable: running them again gives the same
// answer.
//
// Retryable says nothing about whether a failed write was applied. A
// fenced or moved write was refused before it ran. A write whose
// connection was cut may have committed: pgconn.SafeToRetry(err) reports
// the cases where the statement was surely never sent, and is false for
// every error of a COMMIT, whose outcome a cut connection leaves unknown. An insert whose ID
// the plugin made in Go is safe to run again either way: if the first
// attempt committed, the second fails on the primary key instead of
// writing the row twice.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, ErrShardFenced), errors.Is(err, ErrShardMoved), errors.Is(err, ErrServerUnavailable),
		errors.Is(err, ErrServerBusy), errors.Is(err, ErrServerLockSpace), errors.Is(err, ErrAtomicCommit):
		return true
	case errors.Is(err, ErrServerConfig), errors.Is(err, ErrCommitInDoubt), configRefusal(err),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case unavailable(err):
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "25006", "40001", "40P01", "53300", "57014":
			return true
		}
	}
	return false
}
