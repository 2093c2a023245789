package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var updateReadme = flag.Bool("update", false, "rewrite the README's shardctl command list from the command tree")

// The README's list of shardctl commands is between these lines, rendered
// from the command tree by commandList.
const (
	commandsBegin = "<!-- shardctl commands: generated from the command tree; go test ./cmd/shardctl -run TestReadmeCommands -update -->\n"
	commandsEnd   = "<!-- end of shardctl commands -->\n"
)

// commandList renders every runnable command of the tree under root, in
// the tree's order, with its one-line description; a group of commands
// is listed by its commands.
func commandList(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| command | what it does |\n|---|---|\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Runnable() && !sub.HasSubCommands() {
				fmt.Fprintf(&b, "| `%s` | %s |\n", sub.CommandPath(), strings.ReplaceAll(sub.Short, "|", `\|`))
			}
			walk(sub)
		}
	}
	walk(root)
	return b.String()
}

// TestReadmeCommands: the README lists every shardctl command, as the
// command tree has it, so a command added, renamed or redescribed fails
// here until the list is rendered again (-update).
func TestReadmeCommands(t *testing.T) {
	const readme = "../../README.md"
	src, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, commandsBegin), strings.Index(s, commandsEnd)
	if begin < 0 || end < begin {
		t.Fatalf("README.md has no shardctl command list between the lines\n%s...\n%s", commandsBegin, commandsEnd)
	}
	want := commandList(newRoot())
	have := s[begin+len(commandsBegin) : end]
	if have == want {
		return
	}
	if *updateReadme {
		s = s[:begin+len(commandsBegin)] + want + s[end:]
		if err := os.WriteFile(readme, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("README.md's shardctl command list differs from the command tree: run go test ./cmd/shardctl -run TestReadmeCommands -update\nwant:\n%s", want)
}

// TestCommandListEveryCommand: a command added to the tree, nested or not,
// is in the list; a group is listed by its commands.
func TestCommandListEveryCommand(t *testing.T) {
	root := newRoot()
	group := &cobra.Command{Use: "group", Short: "a group", RunE: func(*cobra.Command, []string) error { return nil }}
	group.AddCommand(&cobra.Command{Use: "leaf", Short: "a | leaf", RunE: func(*cobra.Command, []string) error { return nil }})
	root.AddCommand(group)
	list := commandList(root)
	if !strings.Contains(list, "| `shardctl group leaf` | a \\| leaf |\n") || strings.Contains(list, "`shardctl group`") {
		t.Errorf("a nested command renders as:\n%s", list)
	}
	for _, c := range []string{"init", "move", "server set-dsn", "id decode"} {
		if !strings.Contains(list, "| `shardctl "+c+"` |") {
			t.Errorf("shardctl %s is not in the list:\n%s", c, list)
		}
	}
}
