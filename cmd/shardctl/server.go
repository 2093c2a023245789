package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newServerCmd) }

func newServerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Change a registered shard server (its DSNs, its recorded primary, a switchover)",
		Args:  exactArgs(0, "a subcommand: set-dsn, promoted, switchover"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSetDSNCmd(), newPromotedCmd(), newSwitchoverCmd())
	return cmd
}

func newSetDSNCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set-dsn NAME [--app DSN] [--admin DSN] [--direct | --pooled]",
		Short: "Change a server's application DSN, its admin DSN or both (password rotation, a pooler in front)",
		Long: `set-dsn changes the DSNs the catalog holds for server NAME, in a new shard-map
version. --app is the DSN of application traffic, which may name a connection
pooler in transaction mode (PgBouncer, PgDog); --admin is the DSN of
administration and replication (moves, provisioning, migrations, backups),
which must reach the server directly. A DSN not given is kept. An admin DSN
equal to the app DSN makes the server's one DSN serve both.

The catalog records whether the app DSN reaches the server itself or a
pooler: the plugin runs named prepared reads only on direct servers (by
default). A change that moves a DSN to another host, port or database
records it anew from the DSNs: direct when the app DSN names the admin DSN's
host, port and database (another user, such as a login of the application
role), else pooled. --direct or --pooled records it as given, with or
without a DSN change: --direct for an app DSN that reaches the server under
another host name, --pooled for a pooler the DSNs do not show. A server left
direct whose app DSN reaches a Postgres listening on another port than the DSN
names (a pooler, or a forwarded port, between) gets a warning.

Each new DSN must connect before anything changes (--no-check skips that,
for a server that is down). Passwords are never printed. Routers learn of
the change at their next map check.`,
		Args: exactArgs(1, "NAME"),
	}
	catalogDSN := catalogFlag(cmd)
	var app, admin string
	var noCheck, direct, pooled bool
	cmd.Flags().StringVar(&app, "app", "", "DSN for application traffic (may be a pooler)")
	cmd.Flags().BoolVar(&direct, "direct", false, "record that the app DSN reaches the server itself (no pooler)")
	cmd.Flags().BoolVar(&pooled, "pooled", false, "record that the app DSN reaches a connection pooler")
	cmd.Flags().StringVar(&admin, "admin", "", "DSN for administration and replication (direct)")
	cmd.Flags().BoolVar(&noCheck, "no-check", false, "do not connect with the new DSNs first")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		if direct && pooled {
			return fmt.Errorf("%w: give --direct or --pooled, not both", errUsage)
		}
		if app == "" && admin == "" && !direct && !pooled {
			return fmt.Errorf("%w: give --app DSN, --admin DSN or both, or --direct or --pooled", errUsage)
		}
		ctx := cmd.Context()
		if !noCheck {
			for _, d := range []struct{ what, dsn string }{{"app", app}, {"admin", admin}} {
				if d.dsn == "" {
					continue
				}
				if err := tryDSN(ctx, d.dsn); err != nil {
					return fmt.Errorf("server %s: the new %s DSN %s does not connect: %w; nothing was changed (--no-check skips this check)",
						name, d.what, pgdsn.Redact(d.dsn), err)
				}
			}
		}
		cat, err := openCatalog(ctx, catalogDSN)
		if err != nil {
			return err
		}
		defer cat.Close()
		// The admin DSN has its column from catalog version 7 on.
		if err := cat.Migrate(ctx); err != nil {
			return err
		}
		err = cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
			if app != "" || admin != "" {
				if err := tx.SetServerDSN(ctx, name, app, admin); err != nil {
					return err
				}
			}
			switch {
			case direct:
				return tx.SetServerLink(ctx, name, router.LinkDirect)
			case pooled:
				return tx.SetServerLink(ctx, name, router.LinkPooled)
			}
			return nil
		})
		if err != nil {
			return err
		}
		snap, err := cat.Load(ctx)
		if err != nil {
			return err
		}
		srv, _ := snap.Server(name)
		adminShown := "the app DSN"
		if srv.AdminDSN != "" {
			adminShown = pgdsn.Redact(srv.AdminDSN)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "server %s: app DSN %s (%s), admin DSN %s (shard map version %d)\n",
			name, pgdsn.Redact(srv.DSN), reach(srv), adminShown, snap.Version)
		if !noCheck && srv.Direct() {
			if dsnPort, serverPort, err := portsOf(ctx, srv.DSN); err == nil && dsnPort != serverPort {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: server %s is recorded direct, but its app DSN names port %d and reaches a Postgres listening on port %d: "+
					"a pooler (or a forwarded port) stands between; if it is a pooler that does not carry prepared statements, run shardctl server set-dsn %s --pooled\n",
					name, dsnPort, serverPort, name)
			}
		}
		return nil
	}
	return cmd
}

// portsOf connects with dsn and returns the port it names and the port
// the Postgres it reaches listens on (its port setting): a pooler (or a
// forwarded port) in between makes them differ. PgBouncer passes the
// query to the server.
func portsOf(ctx context.Context, dsn string) (dsnPort, serverPort int, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return 0, 0, err
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close(context.Background())
	err = c.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&serverPort)
	return int(cfg.Port), serverPort, err
}

// reach says how a server's app DSN reaches it, as the catalog records it
// or, when it records nothing, as the plugin infers it.
func reach(s router.Server) string {
	l := s.Link
	if l == router.LinkUnrecorded {
		l = router.LinkPooled
		if s.Direct() {
			l = router.LinkDirect
		}
		return l.String() + ", not recorded"
	}
	return l.String()
}

// tryDSN connects with dsn and disconnects.
func tryDSN(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("%w: it does not parse", errUsage)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return c.Close(context.Background())
}
