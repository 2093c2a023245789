package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/rebalance"
)

func init() { commands = append(commands, newVerifyCmd) }

func newVerifyCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "verify --shard N|A-B|A,B,C",
		Short: "Compare row counts and checksums of both copies of shards with an unfinished move",
		Args:  exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&spec, "shard", "", "shards: N, A-B or A,B,C")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		mv, shards, closeAll, err := openMoverFor(cmd, getCatalog, spec)
		if err != nil {
			return err
		}
		defer closeAll()
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARD\tTABLE\tSOURCE ROWS\tTARGET ROWS\tSOURCE SUM\tTARGET SUM\tOK")
		var errs []error
		for _, shard := range shards {
			sums, err := mv.Verify(cmd.Context(), shard)
			for _, s := range sums {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%v\n", shard, s.Table, s.SourceRows, s.TargetRows, s.SourceSum, s.TargetSum, s.Equal())
			}
			if err != nil && !errors.Is(err, rebalance.ErrMismatch) {
				_ = tw.Flush()
				return err
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		return errors.Join(errs...)
	}
	return cmd
}
