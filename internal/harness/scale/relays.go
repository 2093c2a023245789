package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

// envRelay names the environment variable that makes a harness binary a
// relay process (one host's `shardctl relay`); its value is the
// process's relayConfig as JSON.
const envRelay = "SHARDKIT_SCALE_RELAY"

// relayConfig is what the harness tells each relay process.
type relayConfig struct {
	CatalogDSN string // direct: the relay LISTENs
	Socket     string
}

// relayPoll is the relays' version check beside LISTEN, as shardctl
// relay's default.
const relayPoll = 2 * time.Second

// runRelay serves the catalog's map on cfg.Socket, says "ready" on out,
// and stops when in closes.
func runRelay(cfg relayConfig, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := catalog.Open(ctx, cfg.CatalogDSN)
	if err != nil {
		return err
	}
	defer cat.Close()
	l, err := relay.Listen(cfg.Socket)
	if err != nil {
		return err
	}
	_, wait, err := relay.Start(ctx, cat, l, router.WatchOptions{Listen: true, Poll: relayPoll})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	cancel()
	return wait()
}

// relayProc is one relay process of a run.
type relayProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startRelays starts o.Relays relay processes, each on a socket of its
// own in dir, and waits until each serves the map.
func (r *run) startRelays(ctx context.Context, dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for k := range r.o.Relays {
		sock := filepath.Join(dir, fmt.Sprintf("relay-%d.sock", k))
		cfg, _ := json.Marshal(relayConfig{CatalogDSN: r.e.catalogAdmin, Socket: sock})
		p := &relayProc{cmd: exec.CommandContext(ctx, exe)}
		p.cmd.Stderr = os.Stderr
		var out *bufio.Reader
		if p.stdin, out, err = startChild(p.cmd, envRelay, cfg); err != nil {
			return fmt.Errorf("start relay %d: %w", k, err)
		}
		r.relays = append(r.relays, p)
		if line, err := readLine(out); err != nil || line != "ready" {
			return fmt.Errorf("scale: relay %d did not start (%q, %v)", k, line, err)
		}
		r.sockets = append(r.sockets, sock)
	}
	return nil
}

// relayCPU is the CPU seconds the relay processes have used so far.
func (r *run) relayCPU() float64 {
	var cpu float64
	for _, p := range r.relays {
		if _, c, ok := procStat(p.cmd.Process.Pid); ok {
			cpu += c
		}
	}
	return cpu
}

// stopRelays ends the relay processes.
func (r *run) stopRelays() {
	for _, p := range r.relays {
		_ = p.stdin.Close()
	}
	for _, p := range r.relays {
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
}
