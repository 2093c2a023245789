package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newPromotedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "promoted NAME",
		Short: "Record the host that now answers read-write as server NAME's primary (after a failover)",
		Long: `promoted connects to server NAME through its admin DSN (with several hosts and
target_session_attrs=read-write: the writable one), reads the host's system
identifier and timeline, and records them in the catalog as the server's
primary, in a new shard-map version. Routers connect to no host of the server
that is not that primary: an old primary that comes back after a failover is
on an older timeline and gets no statement, and a standby promoted but not yet
recorded gets none either, so run this from the HA tool's promotion hook
(Patroni's on_role_change callback) as soon as the new primary takes writes.

The first run records the current primary. A host on an older timeline than
the record, or of another cluster, is refused and nothing changes.`,
		Args: exactArgs(1, "NAME"),
	}
	catalogDSN := catalogFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		ctx := cmd.Context()
		cat, err := openCatalog(ctx, catalogDSN)
		if err != nil {
			return err
		}
		defer cat.Close()
		// The record has its columns from catalog version 10 on.
		if err := cat.Migrate(ctx); err != nil {
			return err
		}
		got, changed, err := cat.RecordServerPrimary(ctx, name)
		if err != nil {
			return err
		}
		if !changed {
			fmt.Fprintf(cmd.OutOrStdout(), "server %s: primary already recorded (%s)\n", name, got)
			return nil
		}
		fmt.Fprintf(cmd.OutOrStdout(), "server %s: primary recorded (%s); routers use it from their next map check\n", name, got)
		return nil
	}
	return cmd
}
