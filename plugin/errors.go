package plugin

import (
	"errors"
	"fmt"
)

// Sentinel errors of the plugin. Test with errors.Is; most arrive wrapped
// in a *ShardError that names the shard and server.
var (
	// ErrMissingShardKey reports a statement on a sharded table that names
	// no shard key, no ID and no explicit scope, so it could run anywhere.
	// Add the shard key or the ID to the conditions, or scope the statement
	// with plugin.Shard(key), plugin.ShardOfID(id) or plugin.AllShards().
	ErrMissingShardKey = errors.New("statement on a sharded table has no shard key or ID; add one, or use plugin.Shard, plugin.ShardOfID or plugin.AllShards")
	// ErrCrossShard reports a statement for one shard inside a transaction
	// pinned to another. Transactions span one logical shard; run the
	// statement outside the transaction or in its own.
	ErrCrossShard = errors.New("statement for another shard inside a shard-pinned transaction; a transaction spans one logical shard")
	// ErrShardFenced reports a write to a shard that stayed fenced (a move
	// is cutting over) for longer than Config.FenceWait, or, fenced by a
	// server's switchover, past the lease the switchover recorded
	// (failover.Options.Lease). Retry later.
	ErrShardFenced = errors.New("shard is fenced for a move; retry the write shortly")
	// ErrShardMoved reports a write refused by the shard's old server
	// because the shard moved, inside a transaction that cannot be retried
	// transparently. The shard map is reloaded; retry the transaction.
	ErrShardMoved = errors.New("shard moved to another server during the transaction; retry the transaction")
	// ErrUnroutableSQL reports SQL the plugin cannot route safely (raw SQL
	// naming a sharded table outside a shard-pinned transaction, a result
	// shape that cannot be merged across shards, a table name that hides
	// the model's table). It is refused, never sent to a default connection.
	ErrUnroutableSQL = errors.New("SQL on a sharded table cannot be routed")
	// ErrIDShardMismatch reports an ID whose shard bits disagree with the
	// shard of the row's key (or with another condition of the statement).
	// Leave the ID zero to have one generated, or fix the key.
	ErrIDShardMismatch = errors.New("ID's shard bits do not match the row's shard key")
	// ErrShardKeyChange reports an UPDATE that assigns the shard field a
	// value of another shard than the rows it updates, or assigns the ID.
	// A row never changes shard in place: create it anew with the new key
	// (it gets a new ID in the new shard) and delete the old row.
	ErrShardKeyChange = errors.New("update would move rows to another shard; create the row anew under the new key and delete the old one")
	// ErrServerUnavailable reports a statement that could not reach its
	// physical server (connection refused or cut, server shutting down),
	// or whose server is known down (see ServerError). It arrives as a
	// *ServerError naming the server and shards. Retry later; a
	// multi-shard read may use plugin.Partial to get the other servers'
	// rows.
	ErrServerUnavailable = errors.New("physical server unavailable")
	// ErrServerConfig reports a server, or the pooler in front of it,
	// that refused a connection for a configuration reason: a startup
	// parameter it does not support, a failed authentication, an unknown
	// database or user, no privilege to connect. It arrives as a
	// *ConfigError naming the server and the cause. The server is not
	// taken as down: fix the server's DSN or the pooler's configuration,
	// and the next statement uses it.
	ErrServerConfig = errors.New("server refused the connection for a configuration reason")
	// ErrServerLockSpace reports a read across shards that a server
	// refused because its lock table was full ("out of shared memory",
	// SQLSTATE 53200, with Postgres's hint to raise
	// max_locks_per_transaction). Each statement of such a read locks the
	// table and the index of every shard it reads until it ends, about 200
	// locks for a statement of 100 shards, and a server's lock table holds
	// about max_locks_per_transaction × (max_connections +
	// max_prepared_transactions) locks for all its sessions at once. The
	// error names the server and wraps the driver's. Raise
	// max_locks_per_transaction on the server (it takes a restart), or run
	// fewer reads across shards at once; retrying later may succeed.
	ErrServerLockSpace = errors.New("server's lock table is full: raise max_locks_per_transaction on the server, or run fewer reads across shards at once")
	// ErrNotInitialized reports a statement on a gorm.DB whose plugin
	// failed to initialize: db.Use returned an error (wrapped here) that
	// was not handled. Fix the cause and check db.Use's error.
	ErrNotInitialized = errors.New("the shardkit plugin failed to initialize; check db.Use's error")
	// ErrInvalidConfig reports a plugin.Config that cannot work.
	ErrInvalidConfig = errors.New("invalid plugin configuration")
	// ErrMixedTransaction reports a transaction pinned to a logical shard
	// that would also use the default connection (or the reverse): their
	// commits are separate, so one could stay committed when the other
	// fails. Begin the transaction with db.Clauses(plugin.Atomic()) to
	// commit both atomically, or run the unsharded statements apart.
	ErrMixedTransaction = errors.New("transaction would span a shard and the default connection; begin it with db.Clauses(plugin.Atomic()) to commit both atomically, or run the unsharded statements apart")
	// ErrAtomicCommit reports an atomic transaction rolled back at commit:
	// a participant failed to prepare, or the decision could not be
	// recorded. Nothing of it is committed; retry the transaction.
	ErrAtomicCommit = errors.New("atomic transaction rolled back at commit; nothing of it is committed")
	// ErrNoPreparedTransactions reports a server that refuses PREPARE
	// TRANSACTION: set max_prepared_transactions above 0 (and restart it)
	// on every server that atomic transactions touch.
	ErrNoPreparedTransactions = errors.New("server does not allow prepared transactions; set max_prepared_transactions above 0")
	// ErrCommitInDoubt reports an atomic transaction whose commit decision
	// was sent but not confirmed (see InDoubtError). The resolver commits
	// or rolls back every part by the coordinator's record; read the rows
	// before retrying, as the transaction may be committed.
	ErrCommitInDoubt = errors.New("atomic transaction's outcome unknown; the resolver finishes it, read before retrying")
	// ErrInvalidModel reports a model whose shard tags cannot work (no or
	// two shard keys, an unsupported key type, a primary key that is not a
	// 64-bit integer), or whose table the shard schemas lack.
	ErrInvalidModel = errors.New("invalid sharded model")
)

// Errors of lookup columns.
var (
	// ErrDuplicateLookup reports a Create or Update that gives a lookup
	// column (shard:"lookup") a value another row already holds, on any
	// shard. When Postgres reported it, the *pgconn.PgError (unique
	// violation, 23505) is wrapped too. Pick another value.
	ErrDuplicateLookup = errors.New("value is taken: a lookup column is unique across all shards; pick another value")
	// ErrLookupUnroutable reports a statement whose only way to a shard
	// is a condition on a lookup column that the plugin cannot route by:
	// inside OR or NOT, compared other than by = or IN, or with a value
	// of the wrong type. Write it as `column = ?` or `column IN ?` AND-ed
	// with the other conditions, or add the shard key or the ID.
	ErrLookupUnroutable = errors.New("condition on a lookup column cannot be routed; use `column = ?` or `column IN ?` AND-ed with the rest, or add the shard key or ID")
	// ErrLookupInTransaction reports a Create, or an Update that sets a
	// lookup column, inside a transaction: the lookup row lives on
	// another shard, and its reservation must outlast the owner row's
	// commit, which a transaction holds back. Run the write outside the
	// transaction (CreateInBatches opens one: use a Session with
	// SkipDefaultTransaction).
	ErrLookupInTransaction = errors.New("a write that sets a lookup column cannot run inside a transaction; run it on its own")
	// ErrLookupWrite reports a write the plugin cannot keep its lookup
	// tables consistent with: an Update that sets a lookup column
	// without naming one row by its ID through its model
	// (db.Model(&row).Update(...)), an upsert (ON CONFLICT), or a Create
	// whose ID the database would choose.
	ErrLookupWrite = errors.New("write on a model with lookup columns that the plugin cannot keep its lookup tables consistent with")
)

// ShardError carries where a statement was going when it failed.
type ShardError struct {
	Shard  int    // logical shard, -1 when unknown
	Server string // physical server name, "" when unknown
	Table  string // table of the statement
	Err    error
}

func (e *ShardError) Error() string {
	where := fmt.Sprintf("shard %d", e.Shard)
	if e.Table != "" {
		where = "table " + e.Table + ", " + where
	}
	if e.Server != "" {
		where += " on server " + e.Server
	}
	return fmt.Sprintf("shardkit: %s (%s)", e.Err, where)
}

// Unwrap returns the underlying error.
func (e *ShardError) Unwrap() error { return e.Err }

// ConfigError reports a connection to a physical server refused for a
// configuration reason (see ErrServerConfig), which it matches with
// errors.Is. Unlike a *ServerError it says nothing about the server being
// reachable, and the server is not taken as down.
type ConfigError struct {
	Server string // the physical server
	Err    error  // the driver's error: the server's or pooler's refusal
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("shardkit: server %s refused the connection: %v; %s (a configuration error: the server is not taken as down)",
		e.Server, e.Err, configHint(e.Err))
}

// Unwrap returns ErrServerConfig and the driver's error.
func (e *ConfigError) Unwrap() []error { return []error{ErrServerConfig, e.Err} }
