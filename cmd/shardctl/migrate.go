package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/migrations"
)

func init() { commands = append(commands, newMigrateCmd) }

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate [--sql DIR] [--server NAME ...]",
		Short: "Apply new per-shard migrations to every shard schema on every server",
		Long: `migrate records the new NNNN_name.sql files of --sql DIR in the catalog
(refusing an applied file that was edited, or a new version numbered below
an applied one), then applies every recorded version that a shard schema
lacks, servers in parallel, one transaction per batch of schemas. Without
--sql it applies what the catalog already holds. Interrupted (Ctrl-C, kill)
and run again, it finishes without redoing anything. It refuses to run
while shards are moving, unless --allow-moving.

The new files are recorded in the catalog only once every shard schema
applied them: a file that fails on a shard records nothing, and the error
names the shard, server and file. Fix the file (if it failed everywhere) or
what made it fail on that shard, and run migrate again; a file that some
schemas applied before the failure must stay as it was until it finishes.`,
		Args: exactArgs(0, "no arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	var sqlDir string
	var servers []string
	var allowMoving, quiet bool
	var batch int
	cmd.Flags().StringVar(&sqlDir, "sql", "", "directory of the application's per-shard SQL files (NNNN_name.sql)")
	cmd.Flags().StringArrayVar(&servers, "server", nil, "only this server (repeatable; default all)")
	cmd.Flags().BoolVar(&allowMoving, "allow-moving", false, "migrate even while shards are moving or fenced")
	cmd.Flags().IntVar(&batch, "batch", 25, "shard schemas per transaction")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkAtLeast("--batch", batch, 1); err != nil {
			return err
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
		defer cat.Close()
		if err := checkServersExist(ctx, cat, "--server", servers); err != nil {
			return err
		}
		bar := newSchemaBar(cmd.ErrOrStderr(), quiet, "migrating shard schemas")
		err = migrations.Migrate(ctx, cat, shardSQL, migrations.MigrateOptions{
			Apply:       migrations.ApplyOptions{BatchSize: batch},
			Progress:    bar.update,
			AllowMoving: allowMoving,
			Servers:     servers,
		})
		bar.finish()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w (interrupted after %d schemas; run it again to finish)", err, bar.done)
			}
			return err
		}
		if bar.done == 0 {
			fmt.Fprintln(cmd.OutOrStdout(), "every shard schema is up to date")
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "migrated %d shard schemas\n", bar.done)
		}
		return nil
	}
	return cmd
}
