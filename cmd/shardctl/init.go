package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/approle"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newInitCmd) }

func newInitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "init --catalog DSN --server NAME=DSN ... [--admin NAME=DSN ...] [--shards 2000] [--sql DIR] [--app-role NAME]",
		Short: "Create the catalog, register servers, spread the logical shards over them and create every shard schema",
		Long: `init creates (or completes) a shardkit deployment: it migrates the catalog,
records the shard count and ID layout, registers the servers, gives each a
contiguous range of logical shards, and creates every shard schema with its
sequence, next_id() and the application's tables (the NNNN_name.sql files in
--sql DIR). Running it again does nothing; after an interruption it completes.
A server not yet in an existing catalog is registered with no shards.

--server gives the DSN of application traffic, which may name a connection
pooler in transaction mode; --admin NAME=DSN gives server NAME a direct DSN
for administration and replication (schemas are created through it, moves
replicate through it). Without --admin one DSN serves both; change either
later with ` + "`shardctl server set-dsn`" + `. The catalog records whether each
--server DSN reaches the server itself or a pooler (the plugin runs named
prepared reads only on direct servers by default): direct when it names its
--admin DSN's host, port and database (another user, such as a login of the
application role), else pooled; --direct NAME or --pooled NAME records it as
given for a server init registers (for a registered one, server set-dsn).

--app-role NAME names the application's NOLOGIN group role (default: an
existing catalog's, else shardkit_app). init creates it on the catalog's
cluster and every server's where it is missing, records it in the catalog,
and grants it what an application needs: the map and its ID slot leases,
never a server's admin DSN nor a write to the map, and the shard tables on
each shard's home. Make the application's login roles members of it
(CREATE ROLE app LOGIN PASSWORD '…' IN ROLE NAME, on each cluster) and give
--server DSNs that log in as one of them; --catalog and --admin stay the
operator's.`,
		Args: exactArgs(0, "no arguments; servers go in --server NAME=DSN"),
	}
	catalogDSN := catalogFlag(cmd)
	layout := layoutFlags(cmd)
	var servers, admins, replicas, direct, pooled []string
	var shards int
	var sqlDir, appRole string
	var quiet bool
	cmd.Flags().StringArrayVar(&servers, "server", nil, "shard server NAME=DSN (repeat for each server)")
	cmd.Flags().StringArrayVar(&admins, "admin", nil, "admin DSN NAME=DSN of server NAME: direct, for administration and replication (repeatable)")
	cmd.Flags().StringArrayVar(&replicas, "replica", nil, "read replica NAME=DSN of server NAME (repeatable)")
	cmd.Flags().StringArrayVar(&direct, "direct", nil, "record that server NAME's --server DSN reaches it with no pooler between (repeatable)")
	cmd.Flags().StringArrayVar(&pooled, "pooled", nil, "record that server NAME's --server DSN reaches a connection pooler (repeatable)")
	cmd.Flags().IntVar(&shards, "shards", idgen.DefaultShards, "logical shard count, fixed for the catalog's lifetime (default: an existing catalog's, else 2000)")
	cmd.Flags().StringVar(&sqlDir, "sql", "", "directory of the application's per-shard SQL files (NNNN_name.sql)")
	cmd.Flags().StringVar(&appRole, "app-role", "", "the application's NOLOGIN group role, created where missing and granted what an application needs (default: an existing catalog's, else "+catalog.DefaultAppRole+")")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := catalogDSN()
		if err != nil {
			return err
		}
		l, err := layout()
		if err != nil {
			return err
		}
		if cmd.Flags().Changed("shards") {
			if err := checkShardCount("--shards", shards, l.MaxShards()); err != nil {
				return err
			}
		}
		if cmd.Flags().Changed("app-role") && !approle.Valid(appRole) {
			return fmt.Errorf("%w: --app-role %q: %w; use lower case letters, digits and underscores, starting with a letter or _ (at most 63)",
				errUsage, appRole, catalog.ErrBadRole)
		}
		specs, err := parseServers(servers, admins, replicas)
		if err != nil {
			return err
		}
		if err := setLinks(specs, direct, pooled); err != nil {
			return err
		}
		shardSQL, err := sqlFS(sqlDir)
		if err != nil {
			return err
		}
		// Values not given on the command line: an existing catalog's.
		if !cmd.Flags().Changed("shards") {
			shards = 0
		}
		if !cmd.Flags().Changed("epoch-ms") && !cmd.Flags().Changed("slot-bits") {
			l = idgen.Layout{}
		}
		ctx := cmd.Context()
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			return err
		}
		cat = cat.Operator() // shardctl is the operator's tool
		defer cat.Close()
		bar := newSchemaBar(cmd.ErrOrStderr(), quiet, "creating shard schemas")
		err = migrations.Provision(ctx, cat, migrations.ProvisionOptions{
			Servers: specs, Shards: shards, Layout: l, ShardSQL: shardSQL, Progress: bar.update, AppRole: appRole,
		})
		bar.finish()
		if err != nil {
			return err
		}
		cfg, err := cat.Config(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "shardkit initialised: %d servers given (%d shard schemas created or updated now); application role %s\n",
			len(specs), bar.done, cfg.AppRole)
		return nil
	}
	return cmd
}

// parseServers turns --server NAME=DSN, --admin NAME=DSN and --replica
// NAME=DSN into specs, in the order given. A name or a DSN given twice is
// refused: two servers cannot share a name, and one database cannot be
// two servers (a server's own app and admin DSN may be the same).
func parseServers(servers, admins, replicas []string) ([]migrations.ServerSpec, error) {
	var specs []migrations.ServerSpec
	index := map[string]int{}
	dsns := map[string]string{}
	for _, s := range servers {
		name, dsn, err := nameDSN("--server", s)
		if err != nil {
			return nil, err
		}
		if _, dup := index[name]; dup {
			return nil, fmt.Errorf("%w: --server %s: server name %q given twice", errUsage, shownNameDSN(s), name)
		}
		if other, dup := dsns[dsn]; dup {
			return nil, fmt.Errorf("%w: --server %s: the same DSN as server %q", errUsage, shownNameDSN(s), other)
		}
		dsns[dsn] = name
		index[name] = len(specs)
		specs = append(specs, migrations.ServerSpec{Name: name, DSN: dsn})
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%w: no servers: pass --server NAME=DSN for each shard server", errUsage)
	}
	for _, a := range admins {
		name, dsn, err := nameDSN("--admin", a)
		i, known := index[name]
		if err == nil && !known {
			err = fmt.Errorf("%w: --admin %s: want NAME=DSN with NAME one of the --server names", errUsage, shownNameDSN(a))
		}
		if err != nil {
			return nil, err
		}
		if specs[i].AdminDSN != "" {
			return nil, fmt.Errorf("%w: --admin %s: server %q has an admin DSN already", errUsage, shownNameDSN(a), name)
		}
		if other, dup := dsns[dsn]; dup && other != name {
			return nil, fmt.Errorf("%w: --admin %s: the same DSN as server %q", errUsage, shownNameDSN(a), other)
		}
		dsns[dsn] = name
		specs[i].AdminDSN = dsn
	}
	for _, r := range replicas {
		name, dsn, err := nameDSN("--replica", r)
		i, known := index[name]
		if err == nil && !known {
			err = fmt.Errorf("%w: --replica %s: want NAME=DSN with NAME one of the --server names", errUsage, shownNameDSN(r))
		}
		if err != nil {
			return nil, err
		}
		specs[i].Replicas = append(specs[i].Replicas, dsn)
	}
	return specs, nil
}

// setLinks records the --direct and --pooled servers' links in specs.
func setLinks(specs []migrations.ServerSpec, direct, pooled []string) error {
	index := map[string]int{}
	for i, s := range specs {
		index[s.Name] = i
	}
	for _, f := range []struct {
		flag  string
		names []string
		link  router.Link
	}{{"--direct", direct, router.LinkDirect}, {"--pooled", pooled, router.LinkPooled}} {
		for _, name := range f.names {
			i, ok := index[name]
			if !ok {
				return fmt.Errorf("%w: %s %q: want one of the --server names", errUsage, f.flag, name)
			}
			if specs[i].Link != router.LinkUnrecorded && specs[i].Link != f.link {
				return fmt.Errorf("%w: server %q: give --direct or --pooled, not both", errUsage, name)
			}
			specs[i].Link = f.link
		}
	}
	return nil
}

// nameDSN reads a flag's NAME=DSN, the DSN read from a file when given as
// @PATH (pgdsn.Load). Its errors show the DSN redacted.
func nameDSN(flag, s string) (name, dsn string, err error) {
	name, setting, ok := strings.Cut(s, "=")
	if !ok || name == "" || setting == "" {
		return "", "", fmt.Errorf("%w: %s %s: want NAME=DSN or NAME=@FILE", errUsage, flag, shownNameDSN(s))
	}
	if dsn, err = pgdsn.Load(setting); err != nil {
		return "", "", fmt.Errorf("%w: %s %s: %w", errUsage, flag, name, err)
	}
	return name, dsn, nil
}

// shownNameDSN is a NAME=DSN flag value as errors show it: the DSN redacted.
func shownNameDSN(s string) string {
	name, dsn, ok := strings.Cut(s, "=")
	if !ok {
		return strconv.Quote(pgdsn.Redact(s))
	}
	return strconv.Quote(name + "=" + pgdsn.Redact(dsn))
}

// sqlFS opens --sql DIR; an empty dir means none.
func sqlFS(dir string) (fs.FS, error) {
	if dir == "" {
		return nil, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: --sql %s: not a directory", errUsage, dir)
	}
	return os.DirFS(dir), nil
}

// schemaBar draws one bar over all servers from migrations.Progress reports.
// The bar is created at the first report, when the total is known.
type schemaBar struct {
	w     io.Writer
	quiet bool
	what  string
	bar   *progressbar.ProgressBar
	done  int
}

func newSchemaBar(w io.Writer, quiet bool, what string) *schemaBar {
	return &schemaBar{w: w, quiet: quiet, what: what}
}

func (p *schemaBar) update(r migrations.Progress) {
	p.done = r.Done
	if p.quiet {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions(r.Total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.what),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("schemas"),
			progressbar.OptionShowIts(),
			progressbar.OptionThrottle(100_000_000), // 100 ms
			progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set(r.Done)
}

func (p *schemaBar) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
