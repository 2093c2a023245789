package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/resolver"
	"github.com/shardkit/shardkit/router"
)

func init() {
	commands = append(commands, newResolveCmd)
	statusSections = append(statusSections, statusSection{Key: "in_doubt", Collect: collectInDoubt, Text: writeInDoubt})
}

func newResolveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resolve [--database NAME=DSN]... [--watch INTERVAL]",
		Short: "Commit or roll back atomic transactions left prepared by a process that died while committing",
		Long: `resolve lists shardkit's prepared transactions on every shard server and on each
--database (give the application's default connection: atomic transactions
prepare a part there too), and finishes each by its coordinator's record:
committed, COMMIT PREPARED; aborted, ROLLBACK PREPARED; still in progress,
left for a later pass; unknown with no decision row, rolled back once older
than --abort-after. It never finishes a part the wrong way, and runs safely
beside the application's own resolver. With --watch it runs a pass every
INTERVAL until interrupted.

A pass deletes the decision rows no prepared part needs only when it sees
every database a part may be on: with --database, or with --servers-only
when atomic transactions write only the shard servers. Otherwise it keeps
them, since a part on the default connection may still need its row.`,
		Args: exactArgs(0, "no arguments"),
	}
	catalogDSN := catalogFlag(cmd)
	var dbs []string
	var watch, abortAfter time.Duration
	cmd.Flags().StringArrayVar(&dbs, "database", nil, "another database atomic transactions write, NAME=DSN (repeatable)")
	cmd.Flags().DurationVar(&watch, "watch", 0, "run a pass every INTERVAL until interrupted (default: one pass)")
	var serversOnly bool
	cmd.Flags().BoolVar(&serversOnly, "servers-only", false, "atomic transactions write only the shard servers: decision rows no part needs may go without --database")
	cmd.Flags().DurationVar(&abortAfter, "abort-after", resolver.DefaultAbortAfter, "roll back an undecidable part once this old")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		extra := map[string]string{}
		for _, d := range dbs {
			name, dsn, err := nameDSN("--database", d)
			if err != nil {
				return err
			}
			extra[name] = dsn
		}
		cat, err := openCatalog(ctx, catalogDSN)
		if err != nil {
			return err
		}
		defer cat.Close()
		r, err := router.New(ctx, cat)
		if err != nil {
			return err
		}
		res := resolver.New(resolver.Config{Servers: r, Databases: extra, ServersOnly: serversOnly, AbortAfter: abortAfter,
			Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))})
		for {
			rep, err := res.Pass(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "committed %d, rolled back %d, decision rows deleted %d, in doubt %d\n",
				rep.Committed, rep.RolledBack, rep.DecisionsDeleted, len(rep.InDoubt))
			if rep.DecisionsKept > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "decision rows kept %d: give --database for the application's default connection, or --servers-only if atomic transactions write only the shard servers\n",
					rep.DecisionsKept)
			}
			writeInDoubt(cmd.OutOrStdout(), inDoubtOf(rep))
			for _, e := range rep.Errors {
				fmt.Fprintf(cmd.OutOrStdout(), "error: %v\n", e)
			}
			if watch <= 0 {
				if len(rep.Errors) > 0 {
					return fmt.Errorf("resolve: %d errors", len(rep.Errors))
				}
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(watch):
			}
		}
	}
	return cmd
}

// inDoubtStatus is the in_doubt section of shardctl status.
type inDoubtStatus struct {
	Count      int                 `json:"count"`
	OldestSecs float64             `json:"oldest_seconds"`
	Parts      []inDoubtStatusPart `json:"parts,omitempty"`
	Errors     []string            `json:"errors,omitempty"`
}

type inDoubtStatusPart struct {
	GID      string  `json:"gid"`
	Database string  `json:"database"`
	AgeSecs  float64 `json:"age_seconds"`
	Reason   string  `json:"reason"`
}

func inDoubtOf(rep resolver.Report) inDoubtStatus {
	s := inDoubtStatus{Count: len(rep.InDoubt), OldestSecs: rep.Oldest().Seconds()}
	for _, p := range rep.InDoubt {
		s.Parts = append(s.Parts, inDoubtStatusPart{GID: p.GID, Database: p.Database, AgeSecs: p.Age.Seconds(), Reason: p.Reason})
	}
	for _, e := range rep.Errors {
		s.Errors = append(s.Errors, e.Error())
	}
	return s
}

// collectInDoubt surveys the shard servers' prepared transactions
// without finishing any (status only reads).
func collectInDoubt(ctx context.Context, cat *catalog.Catalog) (any, error) {
	r, err := router.New(ctx, cat)
	if err != nil {
		return nil, err
	}
	rep, err := resolver.New(resolver.Config{Servers: r}).Survey(ctx)
	if err != nil {
		return nil, err
	}
	return inDoubtOf(rep), nil
}

func writeInDoubt(w io.Writer, v any) {
	s, ok := v.(inDoubtStatus)
	if !ok {
		return
	}
	if s.Count == 0 {
		fmt.Fprintln(w, "atomic transactions in doubt: none")
	} else {
		fmt.Fprintf(w, "atomic transactions in doubt: %d prepared parts, oldest %.1fs (run shardctl resolve)\n", s.Count, s.OldestSecs)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GID\tDATABASE\tAGE\tREASON")
		for _, p := range s.Parts {
			fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%s\n", p.GID, p.Database, p.AgeSecs, p.Reason)
		}
		_ = tw.Flush()
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "in doubt: error: %s\n", e)
	}
}
