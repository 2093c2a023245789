// Package resolver finishes shardkit's atomic transactions whose process
// died, or lost a connection, while committing them. It lists the prepared
// transactions shardkit left on every shard server and on the other
// databases that take part (the application's default connection), and
// commits or rolls back each by its coordinator's record, never the wrong
// way:
//
//	res := resolver.New(resolver.Config{Servers: r, Databases: map[string]string{"default": appDSN}})
//	go res.Run(ctx)        // a pass every Interval
//	rep := res.Last()      // in-doubt transactions and their age, for metrics
//
// A prepared part's GID names the coordinator server and the transaction
// ID of the coordinator's local transaction, whose commit is the decision
// (see plugin.Atomic). The coordinator's server says whether that
// transaction committed (pg_xact_status): committed, the part commits;
// aborted, it rolls back; in progress, it waits. When PostgreSQL no
// longer knows the status, the decision row the transaction inserted
// (shardkit.tx_decisions) decides, and without one the part rolls back
// once older than AbortAfter (presumed abort). Running several resolvers
// at once is safe: a part finished by one is gone for the others.
package resolver
