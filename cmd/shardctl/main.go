// Command shardctl is the shardkit operator tool: decode and compose IDs,
// find the shard of a key, provision and migrate shards, show status, and
// move logical shards between servers online.
//
// Each subcommand lives in its own file and adds itself to the root command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/pgdsn"
)

// CatalogEnv is the environment variable read when --catalog is absent.
const CatalogEnv = "SHARDKIT_CATALOG"

// errUsage marks errors in the command line itself (exit status 2).
var errUsage = errors.New("usage")

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "shardctl",
		Short:         "Operate shardkit: IDs, shards, provisioning and online shard moves",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w: %w", errUsage, err)
	})
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// commands holds the constructors of the subcommands; each command's file
// appends its own in an init function.
var commands []func() *cobra.Command

// openCatalog opens the catalog whose DSN dsnOf gives (a catalogFlag).
func openCatalog(ctx context.Context, dsnOf func() (string, error)) (*catalog.Catalog, error) {
	dsn, err := dsnOf()
	if err != nil {
		return nil, err
	}
	cat, err := catalog.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return cat.Operator(), nil // shardctl is the operator's tool
}

// catalogFlag adds --catalog to cmd and returns a getter that falls back to
// $SHARDKIT_CATALOG and fails with a usage error when neither is set. A
// value @PATH is read from that file (pgdsn.Load).
func catalogFlag(cmd *cobra.Command) func() (string, error) {
	var dsn string
	cmd.Flags().StringVar(&dsn, "catalog", "", "catalog database DSN, or @FILE holding it (default $"+CatalogEnv+")")
	return func() (string, error) {
		if dsn == "" {
			dsn = os.Getenv(CatalogEnv)
		}
		if dsn != "" {
			d, err := pgdsn.Load(dsn)
			if err != nil {
				return "", fmt.Errorf("%w: --catalog: %w", errUsage, err)
			}
			return d, nil
		}
		return "", fmt.Errorf("%w: no catalog: pass --catalog DSN or set %s", errUsage, CatalogEnv)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run executes the command line and returns the exit status: 0 on success,
// 2 for a malformed command line, 1 for any other error. Errors are one
// line on stderr.
func run(ctx context.Context, args []string) int {
	return runIO(ctx, args, os.Stdout, os.Stderr)
}

// runIO is run with the command's output and errors going to the given
// writers (tests capture them).
func runIO(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "shardctl: %s\n", oneLine(withHint(err)))
		if errors.Is(err, errUsage) || isCobraUsage(err) {
			return 2
		}
		return 1
	}
	return 0
}

// lineBreaks matches a line break with the indentation around it.
var lineBreaks = regexp.MustCompile(`[ \t]*[\r\n]+[ \t]*`)

// oneLine joins the lines of a multi-line message (the driver's errors
// list each address it tried on its own line) with "; ", so that every
// error is one line on stderr.
func oneLine(s string) string {
	return lineBreaks.ReplaceAllString(strings.TrimSpace(s), "; ")
}

// isCobraUsage recognises cobra's own argument errors (unknown command,
// wrong number of arguments), which it does not type.
func isCobraUsage(err error) bool {
	var a argError
	return errors.As(err, &a) || strings.HasPrefix(err.Error(), "unknown command ")
}

// argError is returned by the Args validators of our commands.
type argError struct{ msg string }

func (e argError) Error() string { return e.msg }

// exactArgs is cobra.ExactArgs with a typed usage error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return argError{fmt.Sprintf("want %d argument(s) (%s), got %d", n, names, len(args))}
		}
		return nil
	}
}
