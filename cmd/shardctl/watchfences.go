package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newWatchFencesCmd) }

func newWatchFencesCmd() *cobra.Command {
	var interval time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "watch-fences [--interval 1s] [--once]",
		Short: "End the fences of cutovers whose mover died (their lease lapsed)",
		Long: `End the fences of cutovers whose mover died.

A move's cutover fences the shard under a lease (rebalance.Config.FenceLease):
past it, the source lets writes through again. This command finds shards still
fenced in the catalog past their lease and, on the fenced server: if the cutover
had sealed its barrier (the target has every write) it flips the map; otherwise
it releases the barrier and unfences the shard, and the move can be resumed
(` + "`shardctl move --resume`" + `) or rolled back. It runs until interrupted, or once
with --once. Services that embed shardkit can run rebalance.Mover.WatchFences
instead.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to look for lapsed fences")
	cmd.Flags().BoolVar(&once, "once", false, "look once and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		mv, _, closeAll, err := openMover(cmd, getCatalog, false)
		if err != nil {
			return err
		}
		defer closeAll()
		if !once {
			err := mv.WatchFences(cmd.Context(), interval)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		rs, err := mv.ReleaseLapsedFences(cmd.Context())
		for _, r := range rs {
			fmt.Fprintf(cmd.OutOrStdout(), "shard %d (move %d) fenced on %s: %s\n", r.Shard, r.MoveID, r.Server, r.Action)
		}
		if len(rs) == 0 && err == nil {
			fmt.Fprintln(cmd.OutOrStdout(), "no lapsed fence")
		}
		return err
	}
	return cmd
}
