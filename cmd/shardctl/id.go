package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/idgen"
)

func init() { commands = append(commands, newIDCmd) }

func newIDCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Decode and compose shardkit IDs",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return argError{fmt.Sprintf("unknown id subcommand %q (want decode or compose)", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newIDDecodeCmd(), newIDComposeCmd())
	return cmd
}

// layoutFlags adds --epoch-ms and --slot-bits and returns a getter for
// the resulting (validated) layout.
func layoutFlags(cmd *cobra.Command) func() (idgen.Layout, error) {
	l := idgen.DefaultLayout()
	cmd.Flags().Int64Var(&l.EpochMs, "epoch-ms", idgen.DefaultEpochMs, "ID epoch in unix ms")
	cmd.Flags().Uint8Var(&l.SlotBits, "slot-bits", idgen.DefaultSlotBits, "low sequence bits that name the issuing slot")
	return func() (idgen.Layout, error) {
		if err := l.Validate(); err != nil {
			return l, fmt.Errorf("%w: %w", errUsage, err)
		}
		return l, nil
	}
}

func newIDDecodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "decode [--epoch-ms E] ID",
		Short: "Print an ID's parts as JSON: id, unix_ms, time, shard, seq, slot, counter",
		Args:  exactArgs(1, "ID"),
	}
	layout := layoutFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := layout()
		if err != nil {
			return err
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		p, err := l.Decode(id)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
		return err
	}
	return cmd
}

func newIDComposeCmd() *cobra.Command {
	var unixMs int64
	var shard, seq int
	cmd := &cobra.Command{
		Use:   "compose [--epoch-ms E] --unix-ms U --shard S --seq Q",
		Short: "Print the ID made of a unix ms time, a logical shard and a sequence value",
		Args:  exactArgs(0, "none; use --unix-ms, --shard and --seq"),
	}
	layout := layoutFlags(cmd)
	cmd.Flags().Int64Var(&unixMs, "unix-ms", 0, "time in unix ms (required)")
	cmd.Flags().IntVar(&shard, "shard", 0, "logical shard (required)")
	cmd.Flags().IntVar(&seq, "seq", 0, "sequence value: counter<<slot-bits | slot (required)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var missing []string
		for _, f := range []string{"unix-ms", "shard", "seq"} {
			if !cmd.Flags().Changed(f) {
				missing = append(missing, "--"+f)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: id compose needs %s", errUsage, strings.Join(missing, ", "))
		}
		l, err := layout()
		if err != nil {
			return err
		}
		id, err := l.Compose(unixMs, shard, seq)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), id)
		return err
	}
	return cmd
}

// errBadID reports an ID argument that is not a decimal shardkit ID.
var errBadID = errors.New("not a shardkit ID")

// parseID reads an ID argument: decimal digits only, fitting a positive
// int64. Negative numbers are refused with the reason: the sign bit is set.
func parseID(s string) (int64, error) {
	if strings.HasPrefix(s, "-") && len(s) > 1 && isDigits(s[1:]) {
		return 0, fmt.Errorf("%w: %w: %s has the sign bit set; shardkit IDs are positive", errUsage, errBadID, s)
	}
	if !isDigits(s) {
		return 0, fmt.Errorf("%w: %w: %q is not a decimal number", errUsage, errBadID, s)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %w: %s does not fit in 63 bits", errUsage, errBadID, s)
	}
	return id, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
