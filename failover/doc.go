// Package failover changes a server's primary as a supported operation.
//
// Switchover is the planned case: the server's shards are fenced in the
// catalog (plugin writes wait, as for a move's cutover), the old primary
// is put read-only and its last writes are replayed by the standby, the
// standby is promoted with pg_promote(), recorded as the server's primary
// and the fence released, all in about a second:
//
//	rep, err := failover.Switchover(ctx, cat.Operator(), "b", failover.Options{
//		To:       "10.0.0.12:5432", // the standby, one of the hosts of the server's DSN
//		Progress: func(s failover.Step) { log.Print(s) },
//	})
//
// The server's DSNs name both hosts with target_session_attrs=read-write,
// so that the read-only old primary is never connected to again; the
// catalog's record of the primary (router.Fence) refuses it once it is
// restarted as it was.
package failover
