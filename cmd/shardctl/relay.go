package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newRelayCmd) }

func newRelayCmd() *cobra.Command {
	var socket string
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "relay --socket PATH [--poll 2s]",
		Short: "Serve the shard map to the routers of this host over a Unix socket",
		Long: `relay listens to the catalog on one connection (LISTEN, which needs a direct
connection or a session pooler, and a version check every --poll as a safety
net) and serves the shard map on a Unix socket to the routers of this host:
they wait on it for each new version and read only the placements that
changed. Run one per host, under the host's service manager, and give the
routers relay.Dial(PATH) as their source with router.WatchOptions{Listen: true}:
the catalog then pays for each host, not each process.

The socket is readable and writable by its owner only (the map holds the
servers' DSNs): run the applications under the relay's user. It runs until
interrupted.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket path to serve on (required)")
	var allow []int
	cmd.Flags().IntSliceVar(&allow, "allow-uid", nil, "uids served beside the relay's own (the kernel's peer credentials decide; repeatable)")
	cmd.Flags().DurationVar(&poll, "poll", 2*time.Second, "catalog version check beside LISTEN, in case a notification is lost (0: none)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if socket == "" {
			return fmt.Errorf("%w: --socket PATH is required", errUsage)
		}
		if poll < 0 {
			return fmt.Errorf("%w: --poll %v: want 0 or more", errUsage, poll)
		}
		ctx := cmd.Context()
		dsn, err := getCatalog()
		if err != nil {
			return err
		}
		// The application's view: a relay serves routers, which hold no
		// admin DSN.
		cat, err := catalog.Open(ctx, dsn)
		if err != nil {
			return err
		}
		defer cat.Close()
		l, err := relay.Listen(socket, allow...)
		if err != nil {
			return err
		}
		o := router.WatchOptions{Listen: true, Poll: poll}
		if poll == 0 {
			o.Poll = -1
		}
		s, wait, err := relay.Start(ctx, cat, l, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "relay: serving shard map version %d on %s\n", s.Version(), socket)
		return wait()
	}
	return cmd
}
