package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
)

// Checks of flag values shared by several commands. Each returns a usage
// error (exit status 2) whose message names the flag and what it needs.

// checkShardCount refuses a logical shard count outside 1..max, max being
// what the layout's shard bits can name.
func checkShardCount(flag string, n, max int) error {
	if n < 1 || n > max {
		return fmt.Errorf("%w: %s %d: want a logical shard count from 1 to %d (the layout's shard bits name at most %d shards)",
			errUsage, flag, n, max, max)
	}
	return nil
}

// maxShards is the most logical shards the default layout can name (13
// shard bits: 8192); the CLI creates catalogs only in that layout.
var maxShards = idgen.DefaultLayout().MaxShards()

// checkNonNegative refuses a negative duration.
func checkNonNegative(flag string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: %s %v: want a duration of zero or more", errUsage, flag, d)
	}
	return nil
}

// checkAtLeast refuses an integer flag below min.
func checkAtLeast(flag string, n, min int) error {
	if n < min {
		return fmt.Errorf("%w: %s %d: want at least %d", errUsage, flag, n, min)
	}
	return nil
}

// parseNames reads a comma-separated list of server names (--servers
// a,b): no empty names, no name twice.
func parseNames(flag, list string) ([]string, error) {
	names := strings.Split(list, ",")
	for i, n := range names {
		names[i] = strings.TrimSpace(n)
	}
	return names, checkNames(flag, names)
}

// checkNames refuses empty or repeated server names.
func checkNames(flag string, names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" {
			return fmt.Errorf("%w: %s: empty server name", errUsage, flag)
		}
		if seen[n] {
			return fmt.Errorf("%w: %s: server %q given twice", errUsage, flag, n)
		}
		seen[n] = true
	}
	return nil
}

// checkShardsExist refuses shard numbers the catalog's shard count does
// not have (shards are 0..count-1).
func checkShardsExist(ctx context.Context, cat *catalog.Catalog, shards []int) error {
	cfg, err := cat.Config(ctx)
	if err != nil {
		return err
	}
	for _, s := range shards {
		if s >= cfg.Shards {
			return fmt.Errorf("%w: --shard %d: no such logical shard; the catalog has %d (0 to %d)",
				errUsage, s, cfg.Shards, cfg.Shards-1)
		}
	}
	return nil
}

// checkServersExist refuses server names the catalog does not have.
func checkServersExist(ctx context.Context, cat *catalog.Catalog, flag string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, ok := snap.Server(n); !ok {
			var known []string
			for _, s := range snap.Servers() {
				known = append(known, s.Name)
			}
			return fmt.Errorf("%w: %s %q: no such server in the catalog (servers: %s)", errUsage, flag, n, strings.Join(known, ", "))
		}
	}
	return nil
}
