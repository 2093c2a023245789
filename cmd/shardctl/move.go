package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/rebalance"
)

func init() { commands = append(commands, newMoveCmd) }

// moveFlags are the flags of shardctl move.
type moveFlags struct {
	spec, to                                 string
	resume, complete, offline, quiet, dryRun bool
	soak, drainBound, catchUpTimeout         time.Duration
}

func newMoveCmd() *cobra.Command {
	var f moveFlags
	cmd := &cobra.Command{
		Use:   "move --shard N|A-B|A,B,C (--to SERVER [--offline] [--soak D] [--dry-run] | --resume | --complete)",
		Short: "Move logical shards to another server online; resume or complete a move",
		Long: `Move logical shards to another server while the application keeps writing.

An online move copies the shard with logical replication, cuts over in a short
fenced window, and keeps reverse replication so that 'shardctl rollback' can
return the shard. 'shardctl move --complete' (or --soak D) then drops the
replication and the old copy. --offline copies with COPY while the shard is
fenced, for servers whose wal_level is not logical. A move that stopped (killed,
failed) is continued with --resume or undone with 'shardctl rollback'.

A shard written faster than the target applies fences once its lag would drain
within --drain-bound; if it cannot get there within --catch-up-timeout the move
stops, with nothing fenced, and reports the write and apply rates: throttle the
writers or move at a quieter time, then --resume.

Every new move first runs preflight checks (wal_level, replica identity,
free replication slots and workers, per-shard SQL versions, target schema
absent, objects made outside the per-shard SQL) and changes nothing if one
fails. --dry-run runs only those checks and prints what the move would do:
exit 0 if it would proceed, 1 with the failures.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&f.spec, "shard", "", "shards: N, A-B or A,B,C")
	cmd.Flags().StringVar(&f.to, "to", "", "target server name")
	cmd.Flags().BoolVar(&f.resume, "resume", false, "continue the unfinished moves of the shards")
	cmd.Flags().BoolVar(&f.complete, "complete", false, "finish cut-over moves: drop reverse replication and the old copy")
	cmd.Flags().BoolVar(&f.offline, "offline", false, "copy with COPY while fenced (when wal_level is not logical)")
	cmd.Flags().DurationVar(&f.soak, "soak", 0, "after the cutover, keep reverse replication this long, then complete (0: keep until --complete)")
	cmd.Flags().DurationVar(&f.drainBound, "drain-bound", 0, "a shard written faster than the target applies fences once its lag drains within this (0: 1s)")
	cmd.Flags().DurationVar(&f.catchUpTimeout, "catch-up-timeout", 0, "stop a move whose lag does not fit --drain-bound after this long, reporting the rates (0: 1m)")
	cmd.Flags().BoolVar(&f.quiet, "quiet", false, "no progress bars")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "run the preflight checks and print what the move would do; change nothing")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		shards, err := f.validate()
		if err != nil {
			return err
		}
		mv, cat, closeAll, err := openMover(cmd, getCatalog, !f.quiet && !f.dryRun, func(cfg *rebalance.Config) {
			cfg.DrainBound, cfg.CatchUpTimeout = f.drainBound, f.catchUpTimeout
		})
		if err != nil {
			return err
		}
		defer closeAll()
		ctx := cmd.Context()
		if err := checkShardsExist(ctx, cat, shards); err != nil {
			return err
		}
		if f.to != "" {
			if err := checkServersExist(ctx, cat, "--to", []string{f.to}); err != nil {
				return err
			}
		}
		out := cmd.OutOrStdout()
		if f.dryRun {
			return dryRunMoves(ctx, out, mv, shards, f.to, rebalance.MoveOptions{Offline: f.offline})
		}
		for _, shard := range shards {
			if err := f.run(ctx, out, mv, shard); err != nil {
				return err
			}
		}
		return nil
	}
	return cmd
}

// validate checks the flags' combination and returns the shards.
func (f *moveFlags) validate() ([]int, error) {
	shards, err := parseShardSpec(f.spec)
	if err != nil {
		return nil, err
	}
	modes := 0
	for _, b := range []bool{f.to != "", f.resume, f.complete} {
		if b {
			modes++
		}
	}
	if modes != 1 {
		return nil, fmt.Errorf("%w: give exactly one of --to SERVER, --resume, --complete", errUsage)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"--soak", f.soak}, {"--drain-bound", f.drainBound}, {"--catch-up-timeout", f.catchUpTimeout}} {
		if err := checkNonNegative(d.name, d.d); err != nil {
			return nil, err
		}
	}
	if f.to == "" && (f.offline || f.soak != 0) {
		return nil, fmt.Errorf("%w: --offline and --soak go with --to SERVER (a new move), not --resume or --complete", errUsage)
	}
	if f.dryRun && (f.to == "" || f.soak != 0) {
		return nil, fmt.Errorf("%w: --dry-run goes with --to SERVER (a new move), without --soak", errUsage)
	}
	return shards, nil
}

// run moves, resumes or completes the move of one shard and prints where
// it stands.
func (f *moveFlags) run(ctx context.Context, out io.Writer, mv *rebalance.Mover, shard int) error {
	var m rebalance.Move
	var err error
	switch {
	case f.complete:
		m, err = mv.Complete(ctx, shard)
	case f.resume:
		m, err = mv.Resume(ctx, shard)
	default:
		m, err = mv.Move(ctx, shard, f.to, rebalance.MoveOptions{Offline: f.offline})
		if errors.Is(err, rebalance.ErrSameServer) {
			fmt.Fprintf(out, "shard %d: already on %s\n", shard, f.to)
			return nil
		}
		if err == nil && f.soak > 0 && m.State == rebalance.StateReversible {
			fmt.Fprintf(out, "shard %d: cut over; soaking %v before completing\n", shard, f.soak)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(f.soak):
			}
			m, err = mv.Complete(ctx, shard)
		}
	}
	if err != nil {
		return err
	}
	printMove(out, m)
	return nil
}

// openMover opens the catalog and a mover on it, its progress drawn as
// bars on the command's stderr when bars is set, its Config adjusted by
// tune (if any); closeAll closes both.
// openMoverFor opens a mover for the shards of a --shard spec, after
// checking that each exists: what verify and rollback start with.
func openMoverFor(cmd *cobra.Command, getCatalog func() (string, error), spec string) (*rebalance.Mover, []int, func(), error) {
	shards, err := parseShardSpec(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	mv, cat, closeAll, err := openMover(cmd, getCatalog, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkShardsExist(cmd.Context(), cat, shards); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return mv, shards, closeAll, nil
}

func openMover(cmd *cobra.Command, getCatalog func() (string, error), bars bool, tune ...func(*rebalance.Config)) (mv *rebalance.Mover, cat *catalog.Catalog, closeAll func(), err error) {
	dsn, err := getCatalog()
	if err != nil {
		return nil, nil, nil, err
	}
	cat, err = catalog.Open(cmd.Context(), dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	cat = cat.Operator() // shardctl is the operator's tool
	cfg := rebalance.Config{
		Catalog: cat,
		Logger:  slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if bars {
		cfg.Progress = newMoveBars(cmd.ErrOrStderr()).report
	}
	for _, t := range tune {
		t(&cfg)
	}
	mv, err = rebalance.New(cfg)
	if err != nil {
		cat.Close()
		return nil, nil, nil, err
	}
	return mv, cat, func() { mv.Close(); cat.Close() }, nil
}

func printMove(w io.Writer, m rebalance.Move) {
	switch m.State {
	case rebalance.StateReversible:
		fmt.Fprintf(w, "shard %d: moved %s → %s (move %d), fenced %v; reverse replication kept: "+
			"`shardctl rollback --shard %d` returns it, `shardctl move --complete --shard %d` finishes\n",
			m.Shard, m.Source, m.Target, m.ID, m.FencedFor.Round(time.Microsecond), m.Shard, m.Shard)
	case rebalance.StateCompleted:
		fmt.Fprintf(w, "shard %d: on %s, move %d completed (fenced %v); nothing left on %s\n",
			m.Shard, m.Target, m.ID, m.FencedFor.Round(time.Microsecond), m.Source)
	case rebalance.StateRolledBack:
		fmt.Fprintf(w, "shard %d: back on %s, move %d rolled back\n", m.Shard, m.Source, m.ID)
	default:
		fmt.Fprintf(w, "shard %d: move %d is %s at step %s\n", m.Shard, m.ID, m.State, m.Step)
	}
}

// parseShardSpec reads N, A-B or A,B,C (and mixtures: 1,4-6).
func parseShardSpec(spec string) ([]int, error) {
	if spec == "" {
		return nil, fmt.Errorf("%w: --shard is required (N, A-B or A,B,C)", errUsage)
	}
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%w: --shard %q: want N, A-B (A ≤ B) or A,B,C of non-negative shard numbers", errUsage, spec)
		}
		if b-a > 100000 {
			return nil, fmt.Errorf("%w: --shard %q: range too large", errUsage, spec)
		}
		for s := a; s <= b; s++ {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// dryRunMoves runs the preflight of a move of each shard to target and
// prints the reports. It returns the refusals (exit 1) or nil (exit 0).
func dryRunMoves(ctx context.Context, out io.Writer, mv *rebalance.Mover, shards []int, target string, opts rebalance.MoveOptions) error {
	var refused []error
	for _, shard := range shards {
		r, err := mv.Preflight(ctx, shard, target, opts)
		switch {
		case errors.Is(err, rebalance.ErrSameServer):
			fmt.Fprintf(out, "shard %d: already on %s; nothing to do\n", shard, target)
			continue
		}
		if me := (*rebalance.MoveError)(nil); err != nil && !(errors.As(err, &me) && me.Kind == rebalance.ErrPreflight && len(r.Checks) > 0) {
			return err // not a refusal by the checks: nothing to print
		}
		printReport(out, r)
		if err != nil {
			refused = append(refused, err)
		}
	}
	switch len(refused) {
	case 0:
		return nil
	case 1:
		return refused[0]
	}
	return fmt.Errorf("%d of %d moves would be refused: %w", len(refused), len(shards), errors.Join(refused...))
}

func printReport(out io.Writer, r rebalance.Report) {
	fmt.Fprintf(out, "shard %d (%s): %s → %s, %s move — dry run, nothing changed\n", r.Shard, r.Schema, r.Source, r.Target, modeName(r.Offline))
	fmt.Fprintln(out, "  tables (source estimates):")
	width := 0
	for _, t := range r.Tables {
		width = max(width, len(t.Name))
	}
	for _, t := range r.Tables {
		note := ""
		if t.Extra {
			note = "  made outside the per-shard SQL, carried"
		}
		fmt.Fprintf(out, "    %-*s %10d rows %11s%s\n", width, t.Name, t.Rows, humanBytes(t.Bytes), note)
	}
	if len(r.Carried) == 0 {
		fmt.Fprintln(out, "  carried beyond the per-shard SQL: nothing")
	} else {
		fmt.Fprintf(out, "  carried beyond the per-shard SQL (%d):\n", len(r.Carried))
		for _, o := range r.Carried {
			fmt.Fprintf(out, "    %s\n", o)
		}
	}
	fmt.Fprintln(out, "  checks:")
	failed := 0
	for _, c := range r.Checks {
		where := ""
		if c.Server != "" {
			where = " on " + c.Server
		}
		if c.Err == nil {
			fmt.Fprintf(out, "    ok    %s%s: %s\n", c.Name, where, c.Detail)
			continue
		}
		failed++
		fmt.Fprintf(out, "    FAIL  %s: %s\n", c.Name, c.Err)
	}
	if failed == 0 {
		fmt.Fprintf(out, "  would proceed: all %d checks passed\n", len(r.Checks))
	} else {
		fmt.Fprintf(out, "  would be refused: %d of %d checks failed\n", failed, len(r.Checks))
	}
}

// modeName is how a move copies data, as the journal and status show it.
func modeName(offline bool) string {
	if offline {
		return "offline"
	}
	return "online"
}
