package failover

import (
	"errors"
	"fmt"
)

// Errors of a switchover, for errors.Is. Each arrives in a *StepError that
// says which step failed and what state the server was left in.
var (
	// ErrNotStandby reports a --to host that is not a streaming standby of
	// the server's primary, or not a host of the server's DSN.
	ErrNotStandby = errors.New("the host is not a standby of the server named in its DSN")
	// ErrNoPrimary reports a server none of whose DSN's hosts is a
	// writable primary that the catalog accepts.
	ErrNoPrimary = errors.New("no host of the server is its writable primary")
	// ErrDSNNotSwitchable reports a server DSN that does not name the
	// standby or does not ask for target_session_attrs=read-write: after
	// the switchover its connections would still reach the old primary.
	ErrDSNNotSwitchable = errors.New("the server's DSN cannot follow a switchover")
	// ErrWritesRunning reports write transactions on the old primary that
	// did not end within Options.DrainWait once it was read-only.
	ErrWritesRunning = errors.New("write transactions kept running on the old primary")
	// ErrReplayBehind reports a standby that did not replay the old
	// primary's last write within Options.ReplayWait.
	ErrReplayBehind = errors.New("the standby did not replay the primary's last write in time")
	// ErrPromote reports a pg_promote() that failed or did not finish.
	ErrPromote = errors.New("the standby's promotion did not finish")
)

// StepError is a switchover that stopped at Step. Aborted: nothing
// changed for good (the fence released, the old primary writable again);
// run it again. Otherwise the standby was promoted and Error says what is
// left to do.
type StepError struct {
	Server  string
	Step    string
	Aborted bool
	Err     error
	// Undo is an error met while aborting (Aborted false then).
	Undo error
}

func (e *StepError) Error() string {
	switch {
	case e.Aborted:
		return fmt.Sprintf("shardkit: switchover of server %s stopped at %s and was undone (the old primary is still the primary, writes go on): %v", e.Server, e.Step, e.Err)
	case e.Undo != nil:
		return fmt.Sprintf("shardkit: switchover of server %s stopped at %s: %v; undoing it failed too (%v): on the old primary run ALTER SYSTEM RESET default_transaction_read_only; SELECT pg_reload_conf(); then `shardctl server switchover %s --release`",
			e.Server, e.Step, e.Err, e.Undo, e.Server)
	default:
		return fmt.Sprintf("shardkit: switchover of server %s stopped at %s after the standby was promoted: %v; the old primary stays read-only: record the new primary with `shardctl server promoted %s`, then `shardctl server switchover %s --release` to let writes go on",
			e.Server, e.Step, e.Err, e.Server, e.Server)
	}
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }
