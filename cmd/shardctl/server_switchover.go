package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/failover"
)

func newSwitchoverCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "switchover NAME --to HOST[:PORT]",
		Short: "Make server NAME's standby its primary, with writes held for a moment instead of failed",
		Long: `switchover promotes the standby --to (one of the hosts of server NAME's admin
DSN) in place of the server's primary, with no request failing:

  check      find the primary and the standby among the DSN's hosts
  fence      fence every shard of the server in the catalog: plugin writes wait
  read-only  ALTER SYSTEM SET default_transaction_read_only = on, on the primary
  drain      wait for the write transactions begun before it
  replay     wait until the standby has replayed the primary's last WAL position
  promote    pg_promote() on the standby
  record     record it as the server's primary (shardctl server promoted)
  sessions   end the sessions left on the old primary: it serves no read
  release    release the fence: writes go on, on the new primary

Writes wait from the fence to the release, usually well under a second, for
at most the fence's lease in the catalog (10s); reads go on throughout. A
step that fails before the promotion is undone (the old primary writable, the fence
released) and the command exits non-zero with what happened; a failure after
it says what is left, and --release ends the fence once the new primary is
recorded.

The server's DSNs must name both hosts with target_session_attrs=read-write.
The old primary stays up, read-only: stop it and rebuild it as a standby of
the new primary (pg_rewind) before it serves again.`,
		Args: exactArgs(1, "NAME"),
	}
	catalogDSN := catalogFlag(cmd)
	var opts failover.Options
	var release bool
	cmd.Flags().StringVar(&opts.To, "to", "", "the standby to promote: HOST or HOST:PORT of the server's admin DSN")
	cmd.Flags().DurationVar(&opts.DrainWait, "drain", 2*time.Second, "longest wait for write transactions on the old primary")
	cmd.Flags().DurationVar(&opts.ReplayWait, "replay", 5*time.Second, "longest wait for the standby to replay the last write")
	cmd.Flags().BoolVar(&release, "release", false, "only release a fence a stopped switchover left on the server's shards")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		ctx := cmd.Context()
		out := cmd.OutOrStdout()
		cat, err := openCatalog(ctx, catalogDSN)
		if err != nil {
			return err
		}
		defer cat.Close()
		if err := cat.Migrate(ctx); err != nil {
			return err
		}
		if release {
			n, err := failover.Release(ctx, cat, name)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "server %s: %d shards released\n", name, n)
			return nil
		}
		if opts.To == "" {
			return fmt.Errorf("%w: give --to HOST[:PORT], the standby to promote", errUsage)
		}
		opts.Progress = func(s failover.Step) { fmt.Fprintf(out, "%s\n", s) }
		rep, err := failover.Switchover(ctx, cat, name, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "server %s: primary is now %s (%s); writes were held %v; the old primary %s is read-only: stop it and rebuild it as a standby (pg_rewind)\n",
			name, rep.New, rep.Primary, rep.Fenced.Round(time.Millisecond), rep.Old)
		return nil
	}
	return cmd
}
