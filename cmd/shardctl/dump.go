package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newDumpCmd) }

func newDumpCmd() *cobra.Command {
	var shard int
	var out, pgBin string
	cmd := &cobra.Command{
		Use:   "dump --shard N [--out FILE]",
		Short: "Dump one logical shard (schema, rows, SQL versions, ID sequence) to a file with pg_dump",
		Long: `dump writes one logical shard to a file: a manifest (the shard's per-shard
SQL versions, its sequences, each table's row count and checksum) and a
pg_dump archive of its schema, both from one snapshot on the shard's current
home. Writes go on meanwhile; the dump holds what was committed when it
started. The file appears only when the dump is complete.

Restore it with: shardctl restore --in FILE --yes (into the shard's home) or
shardctl restore --in FILE --into DSN (into a scratch database).`,
		Args: exactArgs(0, "no positional arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	cmd.Flags().IntVar(&shard, "shard", -1, "the logical shard to dump")
	cmd.Flags().StringVar(&out, "out", "", "file to write (default shard_NNNN-<UTC time>.skdump in the current directory)")
	cmd.Flags().StringVar(&pgBin, "pg-bin", "", "directory of pg_dump (default $"+backup.PGBinEnv+", the newest /usr/lib/postgresql/*/bin, or $PATH)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if shard < 0 {
			return fmt.Errorf("%w: --shard N is required (a logical shard number)", errUsage)
		}
		dsn, err := catalogDSN()
		if err != nil {
			return err
		}
		if out == "" {
			out = fmt.Sprintf("%s-%s.skdump", router.SchemaName(shard), time.Now().UTC().Format("20060102T150405Z"))
		}
		ctx := cmd.Context()
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			return err
		}
		cat = cat.Operator() // shardctl is the operator's tool
		defer cat.Close()
		// Write beside the target and rename when complete, so a file
		// with the final name is always a whole dump.
		f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".partial-*")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		m, err := backup.Dump(ctx, cat, shard, f, backup.DumpOptions{PGBin: pgBin})
		if err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), out); err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "dumped shard %d (%s on server %s, map version %d) to %s: %d bytes\n",
			m.Shard, m.Schema, m.Server, m.MapVersion, out, fi.Size())
		printManifest(w, m)
		return nil
	}
	return cmd
}
