package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/catalog"
)

func init() { commands = append(commands, newRestoreCmd) }

func newRestoreCmd() *cobra.Command {
	var in, into, pgBin string
	var yes bool
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "restore --in FILE (--yes | --into DSN)",
		Short: "Restore a shard dump into the shard's home (fenced, replacing its schema) or into a scratch database",
		Long: `restore reads a file written by shardctl dump.

With --yes it restores into the shard's current home: the shard is fenced in
the shard map (routers hold its writes) and, in one transaction, its schema
is dropped and replaced by the dump's, every table is checked against the
dump's row counts and checksums (a mismatch rolls everything back), and the
ID sequence is carried past the dump, the replaced schema and the newest
restored ID, so next_id() never issues an ID it issued before. Every row
written since the dump is lost: that is what --yes confirms.

With --into DSN it restores into a scratch database instead (any database on
any server; shardkit's server objects are installed there if missing), for
inspection; the catalog is not changed.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	cmd.Flags().StringVar(&in, "in", "", "dump file written by shardctl dump")
	cmd.Flags().BoolVar(&yes, "yes", false, "replace the shard's schema on its home, losing the rows written since the dump")
	cmd.Flags().StringVar(&into, "into", "", "DSN of a scratch database to restore into instead of the shard's home")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", backup.DefaultLockTimeout, "how long to wait for transactions still using the replaced schema")
	cmd.Flags().StringVar(&pgBin, "pg-bin", "", "directory of pg_restore and psql (default $"+backup.PGBinEnv+", the newest /usr/lib/postgresql/*/bin, or $PATH)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if in == "" {
			return fmt.Errorf("%w: --in FILE is required", errUsage)
		}
		if yes && into != "" {
			return fmt.Errorf("%w: --yes (replace on the shard's home) and --into (scratch database) exclude each other", errUsage)
		}
		dsn, err := catalogDSN()
		if err != nil {
			return err
		}
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		ctx := cmd.Context()
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			return err
		}
		cat = cat.Operator() // shardctl is the operator's tool
		defer cat.Close()
		res, err := backup.Restore(ctx, cat, f, backup.RestoreOptions{Into: into, Replace: yes, LockTimeout: lockTimeout, PGBin: pgBin})
		if errors.Is(err, backup.ErrNotConfirmed) {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if err != nil {
			return err
		}
		m, w := res.Manifest, cmd.OutOrStdout()
		if res.Server != "" {
			fmt.Fprintf(w, "restored shard %d (%s) on its home, server %s, from the dump of %s; shard active again at map version %d\n",
				m.Shard, m.Schema, res.Server, m.TakenAt.UTC().Format(time.RFC3339), res.MapVersion)
		} else {
			fmt.Fprintf(w, "restored shard %d (%s) into the scratch database, from the dump of %s; the catalog is unchanged\n",
				m.Shard, m.Schema, m.TakenAt.UTC().Format(time.RFC3339))
		}
		printManifest(w, m)
		fmt.Fprintf(w, "every table matches the dump's row count and checksum; id_seq now at %d (next_id() issues above it)\n", res.IDSeq)
		if res.Server != "" {
			fmt.Fprintln(w, "the schema is at the dump's SQL versions: run `shardctl migrate` if newer ones exist")
		}
		return nil
	}
	return cmd
}

// printManifest prints a dump's tables and SQL versions.
func printManifest(w io.Writer, m *backup.Manifest) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS\tCHECKSUM")
	for _, t := range m.Tables {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", t.Name, t.Rows, t.Sum)
	}
	_ = tw.Flush()
	for _, v := range m.Versions {
		fmt.Fprintf(w, "SQL version %d %s: %s\n", v.Version, v.Part, v.Name)
	}
	for _, s := range m.Sequences {
		fmt.Fprintf(w, "sequence %s at %d when dumped\n", s.Name, s.LastValue)
	}
}
