package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/rebalance"
)

func init() { commands = append(commands, newRebalanceCmd) }

func newRebalanceCmd() *cobra.Command {
	var dryRun, complete, offline, quiet bool
	var parallel, maxMoves int
	var by, servers string
	cmd := &cobra.Command{
		Use:   "rebalance [--dry-run] [--parallel K] [--by bytes|rows] [--servers a,b,...] [--complete]",
		Short: "Even out the servers by moving logical shards (onto new, empty servers too)",
		Args:  exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan, move nothing")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "moves to run at once")
	cmd.Flags().StringVar(&by, "by", "bytes", "balance by bytes or rows")
	cmd.Flags().StringVar(&servers, "servers", "", "servers to balance over (default: every active server); shards elsewhere are moved onto them")
	cmd.Flags().IntVar(&maxMoves, "max-moves", 0, "at most this many moves (0: no limit)")
	cmd.Flags().BoolVar(&complete, "complete", false, "complete each move after its cutover (no rollback)")
	cmd.Flags().BoolVar(&offline, "offline", false, "offline moves (see shardctl move --offline)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bars")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkAtLeast("--parallel", parallel, 1); err != nil {
			return err
		}
		if err := checkAtLeast("--max-moves", maxMoves, 0); err != nil {
			return err
		}
		var only []string
		if cmd.Flags().Changed("servers") {
			var err error
			if only, err = parseNames("--servers", servers); err != nil {
				return err
			}
		}
		measure := rebalance.Measure(by)
		if measure != rebalance.ByBytes && measure != rebalance.ByRows {
			return fmt.Errorf("%w: --by %q: want bytes or rows", errUsage, by)
		}
		mv, cat, closeAll, err := openMover(cmd, getCatalog, !quiet && !dryRun)
		if err != nil {
			return err
		}
		defer closeAll()
		ctx := cmd.Context()
		if err := checkServersExist(ctx, cat, "--servers", only); err != nil {
			return err
		}
		sizes, err := mv.Sizes(ctx, measure)
		if err != nil {
			return err
		}
		snap, err := cat.Load(ctx)
		if err != nil {
			return err
		}
		opts := rebalance.PlanOptions{MaxMoves: maxMoves, Servers: only}
		plan, err := rebalance.Plan(snap, sizes, opts)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		before, after := rebalance.Loads(snap, sizes, plan)
		names := make([]string, 0, len(before))
		for n := range before {
			names = append(names, n)
		}
		sort.Strings(names)
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "SERVER\t%s NOW\t%s AFTER\n", strings.ToUpper(by), strings.ToUpper(by))
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", n, before[n], after[n])
		}
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "SHARD\tFROM\tTO\t%s\n", strings.ToUpper(by))
		for _, m := range plan {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\n", m.Shard, m.From, m.To, m.Size)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "%d moves\n", len(plan))
		if dryRun || len(plan) == 0 {
			return nil
		}
		results, err := mv.Rebalance(ctx, plan, rebalance.Options{Parallel: parallel, Complete: complete, Offline: offline})
		for _, r := range results {
			if r.Err == nil {
				printMove(out, r.Move)
			}
		}
		return err
	}
	return cmd
}
