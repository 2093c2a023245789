package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newShardOfCmd) }

func newShardOfCmd() *cobra.Command {
	var shards int
	var str bool
	cmd := &cobra.Command{
		Use:   "shard-of [--shards N] [--string] KEY",
		Short: "Print the logical shard of a shard key: integer keys mod N, --string keys by their stable hash",
		Args:  exactArgs(1, "KEY"),
	}
	cmd.Flags().IntVar(&shards, "shards", idgen.DefaultShards, "number of logical shards")
	cmd.Flags().BoolVar(&str, "string", false, "hash KEY as a string key (64-bit FNV-1a) instead of reading an integer")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkShardCount("--shards", shards, maxShards); err != nil {
			return err
		}
		var shard int
		var err error
		if str {
			shard, err = router.ShardOfString(args[0], shards)
		} else {
			var key int64
			key, err = parseKey(args[0])
			if err != nil {
				return err
			}
			shard, err = router.ShardOfKey(key, shards)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), shard)
		return err
	}
	return cmd
}

// parseKey reads an integer shard key.
func parseKey(s string) (int64, error) {
	k, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if strings.HasPrefix(s, "-") && isDigits(s[1:]) {
			return 0, fmt.Errorf("%w: %w: %s", errUsage, router.ErrNegativeKey, s)
		}
		return 0, fmt.Errorf("%w: %q is not an integer shard key (use --string to hash a string key)", errUsage, s)
	}
	return k, nil
}
