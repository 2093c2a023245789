package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/migrations"
)

func init() { commands = append(commands, newMigrateCmd) }

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate [--sql DIR] [--server NAME ...] [--dry-run] [--lock-timeout 500ms] [--max-lock-wait 1m] [--workers-per-server 1] [--workers N] [--pause D]",
		Short: "Apply new per-shard migrations to every shard schema on every server",
		Long: `migrate records the new NNNN_name.sql files of --sql DIR in the catalog
(refusing an applied file that was edited, or a new version numbered below
an applied one), then applies every recorded version that a shard schema
lacks, servers in parallel. Without --sql it applies what the catalog
already holds. --dry-run lists what would run where and changes nothing.

Each schema is migrated in a transaction of its own, with lock_timeout set
to --lock-timeout: requests queued behind a waiting ALTER wait at most that
long. A schema whose lock times out is rolled back and retried after the
others, with backoff and jitter; each timeout is reported with the session
that holds the lock (pid, state, age, last statement). A schema that spent
--max-lock-wait in such attempts is given up: the others finish, and
migrate exits naming the blocker. A file with the line
  -- shardkit:no-transaction
runs outside a transaction, statement by statement (CREATE INDEX
CONCURRENTLY, which waits up to --build-lock-timeout for older
transactions; an index left invalid by an interrupted build is rebuilt).

Every schema migrated is recorded on its server at once: interrupted
(Ctrl-C, kill) or stopped, and run again, migrate does only what is left.
The catalog records the new files once every shard schema applied them: a
file that fails on a shard records nothing, and the error names the shard,
server and file. Fix the file (if it failed everywhere) or what made it
fail on that shard, and run migrate again; a file that some schemas applied
before the failure must stay as it was until it finishes.

migrate refuses while a move is unfinished (running, reversible or rolling
back): complete or roll it back first. While migrate runs, no move starts.`,
		Args: exactArgs(0, "no arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	var sqlDir string
	var servers []string
	var allowMoving, quiet, dryRun bool
	var batch, perServer, workers int
	var lockTimeout, maxLockWait, buildLockTimeout, pause time.Duration
	cmd.Flags().StringVar(&sqlDir, "sql", "", "directory of the application's per-shard SQL files (NNNN_name.sql)")
	cmd.Flags().StringArrayVar(&servers, "server", nil, "only this server (repeatable; default all); the catalog records the files once no server lacks them")
	cmd.Flags().BoolVar(&allowMoving, "allow-moving", false, "migrate even while the shard map shows shards moving or fenced with no unfinished move in the journal")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would run where; change nothing")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", migrations.DefaultLockTimeout, "longest wait for one lock before the schema is rolled back and retried later")
	cmd.Flags().DurationVar(&maxLockWait, "max-lock-wait", migrations.DefaultMaxLockWait, "time one schema may spend in attempts that time out before it is given up")
	cmd.Flags().DurationVar(&buildLockTimeout, "build-lock-timeout", 0, "longest wait of a CREATE INDEX CONCURRENTLY for older transactions (0: --max-lock-wait); no request waits behind it")
	cmd.Flags().IntVar(&perServer, "workers-per-server", 1, "schemas migrated at once on each server, each on its own connection")
	cmd.Flags().IntVar(&workers, "workers", 0, "schemas migrated at once over all servers (0: no bound beyond --workers-per-server)")
	cmd.Flags().DurationVar(&pause, "pause", 0, "pause of each worker after each schema (throttle)")
	// --batch is kept so that scripts that pass it still run; every schema
	// now has a transaction of its own.
	cmd.Flags().IntVar(&batch, "batch", 25, "ignored: every schema has a transaction of its own")
	_ = cmd.Flags().MarkHidden("batch")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar (lock waits are still reported)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkAtLeast("--batch", batch, 1); err != nil {
			return err
		}
		if err := checkAtLeast("--workers-per-server", perServer, 1); err != nil {
			return err
		}
		if err := checkAtLeast("--workers", workers, 0); err != nil {
			return err
		}
		for _, d := range []struct {
			flag string
			v    time.Duration
		}{{"--lock-timeout", lockTimeout}, {"--max-lock-wait", maxLockWait}, {"--build-lock-timeout", buildLockTimeout}, {"--pause", pause}} {
			if d.v < 0 {
				return fmt.Errorf("%w: %s %s: want a duration of 0 or more", errUsage, d.flag, d.v)
			}
		}
		if lockTimeout > 0 && lockTimeout < time.Millisecond {
			return fmt.Errorf("%w: --lock-timeout %s: want at least 1ms (Postgres counts milliseconds)", errUsage, lockTimeout)
		}
		if err := checkNames("--server", servers); err != nil {
			return err
		}
		dsn, err := catalogDSN()
		if err != nil {
			return err
		}
		shardSQL, err := sqlFS(sqlDir)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			return err
		}
		cat = cat.Operator() // shardctl is the operator's tool
		defer cat.Close()
		if err := checkServersExist(ctx, cat, "--server", servers); err != nil {
			return err
		}
		if lockTimeout == 0 {
			lockTimeout = -1 // the flag's 0 is "no timeout"; the option's 0 is the default
		}
		bar := newMigrateBar(cmd.ErrOrStderr(), quiet || dryRun)
		sum, err := migrations.MigrateWithSummary(ctx, cat, shardSQL, migrations.MigrateOptions{
			Progress:         bar.update,
			AllowMoving:      allowMoving,
			Servers:          servers,
			LockTimeout:      lockTimeout,
			MaxLockWait:      maxLockWait,
			BuildLockTimeout: buildLockTimeout,
			WorkersPerServer: perServer,
			Workers:          workers,
			Pause:            pause,
			DryRun:           dryRun,
		})
		bar.finish()
		out := cmd.OutOrStdout()
		if dryRun && err == nil {
			printPlan(out, sum)
			return nil
		}
		if sum.Pending > 0 {
			printSummary(out, sum)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w (interrupted after %d schemas; run it again to finish)", err, sum.Schemas)
			}
			return err
		}
		if sum.Pending == 0 {
			fmt.Fprintln(out, "every shard schema is up to date")
		}
		return nil
	}
	return cmd
}

// printPlan writes a dry run's plan, one line per server and file.
func printPlan(w io.Writer, sum migrations.Summary) {
	if len(sum.Planned) == 0 {
		fmt.Fprintln(w, "dry run: every shard schema is up to date")
		return
	}
	fmt.Fprintf(w, "dry run: %d shard schemas on %d servers would be migrated\n", sum.Pending, sum.Servers)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tFILE\tSCHEMAS\tSHARDS\tRUNS")
	for _, p := range sum.Planned {
		runs := "one transaction per schema"
		if p.NoTx {
			runs = "outside a transaction"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", p.Server, p.File, p.Schemas, p.Ranges, runs)
	}
	_ = tw.Flush()
}

// printSummary writes what a run did.
func printSummary(w io.Writer, sum migrations.Summary) {
	fmt.Fprintf(w, "migrated %d shard schemas on %d servers in %s", sum.Schemas, sum.Servers, sum.Elapsed.Round(time.Millisecond))
	if left := sum.Pending - sum.Schemas; left > 0 {
		fmt.Fprintf(w, " (%d left: run migrate again)", left)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "lock timeouts retried: %d", sum.Retries)
	if sum.LongestLockWait > 0 {
		fmt.Fprintf(w, "; longest lock wait: %s (%s)", sum.LongestLockWait.Round(time.Millisecond), sum.LongestLockSchema)
	}
	fmt.Fprintf(w, "; slowest schema: %s\n", sum.SlowestSchema.Round(time.Millisecond))
	for _, f := range sum.Recorded {
		fmt.Fprintf(w, "recorded in the catalog: %s\n", f)
	}
}
