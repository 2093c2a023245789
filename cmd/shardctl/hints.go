package main

import (
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

// The library's errors name its Go API (MoveOptions.Offline,
// Mover.Resume); shardctl's users need the command line that does the same.
// hint returns that command line for an error, or "" when there is none.
func hint(err error) string {
	var me *rebalance.MoveError
	isMove := errors.As(err, &me)
	switch {
	case isMove && errors.Is(err, rebalance.ErrReverseLost):
		return fmt.Sprintf("from the command line: `shardctl move --shard %d --complete`, then move the shard back with a new `shardctl move` if it must go back", me.Shard)
	case isMove && me.ID != 0:
		return fmt.Sprintf("from the command line: `shardctl move --shard %d --resume` or `shardctl rollback --shard %d`", me.Shard, me.Shard)
	case errors.Is(err, rebalance.ErrMoveInProgress):
		return "`shardctl move --resume` or `--complete` finishes it; `shardctl rollback` undoes it"
	case errors.Is(err, rebalance.ErrNotLogical):
		return "or move with `shardctl move --offline`"
	case errors.Is(err, rebalance.ErrPreparedTransactions):
		return "`shardctl resolve` finishes them; then `shardctl move --resume`"
	case errors.Is(err, rebalance.ErrCutoverAborted):
		return "retry with `shardctl move --resume`"
	case isMove && me.Kind == rebalance.ErrPreflight && me.Source != "": // refused by its checks (a Report's)
		return fmt.Sprintf("nothing was changed; `shardctl move --shard %d --to %s --dry-run` lists every check", me.Shard, me.Target)
	case errors.Is(err, catalog.ErrNoIdentity):
		return "run `shardctl migrate`"
	case errors.Is(err, catalog.ErrServerBusy):
		return "`shardctl status` shows the server's moves; `shardctl move --complete` or `shardctl rollback` ends one"
	case errors.Is(err, router.ErrNoCatalog):
		return "run `shardctl init --server NAME=DSN` first"
	case errors.Is(err, migrations.ErrDuplicateServer):
		return "`shardctl status` shows the registered servers; `shardctl server set-dsn` changes a server's DSNs"
	case errors.Is(err, router.ErrUnknownServer):
		return "register it with `shardctl init --server NAME=DSN`"
	case errors.Is(err, backup.ErrNotConfirmed):
		return "confirm with --yes, or restore into a scratch database with --into"
	case errors.Is(err, backup.ErrShardBusy):
		return "finish or undo its move first: `shardctl move --complete` or `shardctl rollback`"
	case errors.Is(err, backup.ErrNoSchema):
		return "check `shardctl status` and the server"
	}
	return ""
}

// withHint adds the command line that deals with err to its message.
func withHint(err error) string {
	if h := hint(err); h != "" {
		return err.Error() + " — " + h
	}
	return err.Error()
}
