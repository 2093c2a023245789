package main

import (
	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newRollbackCmd) }

func newRollbackCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "rollback --shard N|A-B|A,B,C",
		Short: "Return shards with an unfinished move to their source server",
		Long: `Return shards with an unfinished move to their source server.

Before the cutover this removes what the move made on the target. After it (a
move kept reversible), the shard is cut over back to its source through the
reverse replication, with the same short fenced window. An interrupted
rollback is continued by running the command again.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&spec, "shard", "", "shards: N, A-B or A,B,C")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		mv, shards, closeAll, err := openMoverFor(cmd, getCatalog, spec)
		if err != nil {
			return err
		}
		defer closeAll()
		for _, shard := range shards {
			m, err := mv.Rollback(cmd.Context(), shard)
			if err != nil {
				return err
			}
			printMove(cmd.OutOrStdout(), m)
		}
		return nil
	}
	return cmd
}
