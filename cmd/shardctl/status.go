package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/migrations"
)

func init() { commands = append(commands, newStatusCmd) }

// statusSection is one more part of `shardctl status`, contributed by
// another command's file (moves in progress, for one): append it to
// statusSections in that file's init function. Collect runs after the main
// report; its value goes under Key in --json, and Text prints it after the
// server table. A Collect error is shown in the section, not fatal.
type statusSection struct {
	Key     string
	Collect func(ctx context.Context, cat *catalog.Catalog) (any, error)
	Text    func(w io.Writer, v any)
}

// statusSections are the extra parts of `shardctl status`, in order.
var statusSections []statusSection

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show servers (shards, estimated rows, bytes), shards not active and the map version",
		Long: `status reads the shard map and asks every server for the size of its shard
schemas. Rows are the planner's estimates (pg_class.reltuples or
pg_stat_user_tables.n_live_tup, whichever is larger) and bytes are
pg_total_relation_size: exact counts over thousands of schemas would read
every table. A server that cannot be reached is shown with its error.`,
		Args: exactArgs(0, "no arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	var asJSON bool
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object, for scripts")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		cat, err := openCatalog(ctx, catalogDSN)
		if err != nil {
			return err
		}
		defer cat.Close()
		r, err := migrations.Status(ctx, cat)
		if err != nil {
			return err
		}
		extra := make([]any, len(statusSections))
		for i, s := range statusSections {
			v, err := s.Collect(ctx, cat)
			if err != nil {
				v = map[string]string{"error": err.Error()}
			}
			extra[i] = v
		}
		if asJSON {
			return writeStatusJSON(cmd.OutOrStdout(), r, extra)
		}
		writeStatusText(cmd.OutOrStdout(), r)
		for i, s := range statusSections {
			if m, ok := extra[i].(map[string]string); ok && m["error"] != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s: error: %s\n", s.Key, m["error"])
				continue
			}
			fmt.Fprintln(cmd.OutOrStdout())
			s.Text(cmd.OutOrStdout(), extra[i])
		}
		return nil
	}
	return cmd
}

func writeStatusJSON(w io.Writer, r *migrations.Report, extra []any) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	for i, s := range statusSections {
		obj[s.Key] = extra[i]
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(obj)
}

func writeStatusText(w io.Writer, r *migrations.Report) {
	l := r.Layout
	fmt.Fprintf(w, "shard map version %d: %d logical shards; ID layout %d/%d/%d bits, %d slot bits, epoch %s\n\n",
		r.MapVersion, r.Shards, l.TimeBits, l.ShardBits, l.SeqBits, l.SlotBits,
		time.UnixMilli(l.EpochMs).UTC().Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tSHARDS\tROWS (est.)\tSIZE\tRANGES")
	var shards int
	var rows, bytes int64
	for _, s := range r.Servers {
		ranges := s.Ranges
		if s.Error != "" {
			ranges += "  ERROR: " + s.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, s.State, s.Shards, s.Rows, humanBytes(s.Bytes), ranges)
		shards += s.Shards
		rows += s.Rows
		bytes += s.Bytes
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%s\t\n", shards, rows, humanBytes(bytes))
	_ = tw.Flush()
	// Passwords are masked (migrations.Status): status output gets pasted.
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tAPP DSN\tADMIN DSN")
	for _, s := range r.Servers {
		admin := "(the app DSN)"
		if s.AdminDSN != "" {
			admin = s.AdminDSN
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.DSN, admin)
	}
	_ = tw.Flush()
	if len(r.NotActive) == 0 {
		fmt.Fprintln(w, "\nevery shard is active")
		return
	}
	fmt.Fprintf(w, "\n%d shards not active:\n", len(r.NotActive))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSERVER\tSTATE")
	for _, p := range r.NotActive {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", p.Shard, p.Server, p.State)
	}
	_ = tw.Flush()
}

// humanBytes writes a byte count in binary units: 1536 → "1.5 KiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
