package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/relay"
	"github.com/shardkit/shardkit/router"
)

func init() { commands = append(commands, newRelayCmd) }

// relayFlags are the flags of `shardctl relay` that say where it listens
// and how it authenticates its clients.
type relayFlags struct {
	socket, listen               string
	allow                        []int
	tokenFile                    string
	tlsCert, tlsKey, tlsClientCA string
}

func newRelayCmd() *cobra.Command {
	var f relayFlags
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "relay (--socket PATH | --listen HOST:PORT --token-file FILE | --tls-cert ... ) [--poll 2s]",
		Short: "Serve the shard map to the routers of this host over a Unix socket, or to those of others over TCP",
		Long: `relay listens to the catalog on one connection (LISTEN, which needs a direct
connection or a session pooler, and a version check every --poll as a safety
net) and serves the shard map on a Unix socket to the routers of this host:
they wait on it for each new version and read only the placements that
changed. Run one per host, under the host's service manager, and give the
routers relay.DialWith(PATH, relay.Options{Catalog: cat}) as their source with
router.WatchOptions{Listen: true}: the catalog then pays for each host, not
each process, and each map is checked against the catalog it must be of.

The socket is readable and writable by its owner only (the map holds the
servers' DSNs), and serves only peers whose uid the kernel reports as the
relay's own or one of --allow-uid.

On TCP (--listen) the relay requires a credential: a token (--token-file, a
file of one line readable by its owner only; clients send it as a bearer
token) and/or TLS with client certificates (--tls-cert and --tls-key, the
relay's own, and --tls-client-ca, the CA of its clients' certificates). A
token without TLS is accepted only on a loopback address. It runs until
interrupted.`,
		Args: exactArgs(0, "no positional arguments"),
	}
	getCatalog := catalogFlag(cmd)
	cmd.Flags().StringVar(&f.socket, "socket", "", "Unix socket path to serve on")
	cmd.Flags().StringVar(&f.listen, "listen", "", "TCP address (host:port) to serve on instead of a socket; needs --token-file or --tls-client-ca")
	cmd.Flags().IntSliceVar(&f.allow, "allow-uid", nil, "uids served on the socket beside the relay's own (the kernel's peer credentials decide; repeatable)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the token TCP clients must send (mode 600)")
	cmd.Flags().StringVar(&f.tlsCert, "tls-cert", "", "the relay's TLS certificate (PEM), for --listen")
	cmd.Flags().StringVar(&f.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	cmd.Flags().StringVar(&f.tlsClientCA, "tls-client-ca", "", "CA certificates (PEM) whose client certificates the relay accepts, for --listen")
	cmd.Flags().DurationVar(&poll, "poll", 2*time.Second, "catalog version check beside LISTEN, in case a notification is lost (0: none)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if poll < 0 {
			return fmt.Errorf("%w: --poll %v: want 0 or more", errUsage, poll)
		}
		if err := f.check(); err != nil {
			return err
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
		l, where, err := f.open()
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
		st, _ := cat.Stamp(ctx)
		fmt.Fprintf(cmd.OutOrStdout(), "relay: serving shard map version %d of catalog %s on %s\n", s.Version(), st.ID, where)
		return wait()
	}
	return cmd
}

// check refuses a combination of flags that cannot be served.
func (f *relayFlags) check() error {
	switch {
	case f.socket == "" && f.listen == "":
		return fmt.Errorf("%w: --socket PATH or --listen HOST:PORT is required", errUsage)
	case f.socket != "" && f.listen != "":
		return fmt.Errorf("%w: --socket and --listen: one relay serves on one of them; run two relays", errUsage)
	case f.socket != "" && (f.tokenFile != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsClientCA != ""):
		return fmt.Errorf("%w: --token-file and --tls-* are for --listen: a socket serves the uids its peer credentials name (--allow-uid)", errUsage)
	case f.listen != "" && len(f.allow) > 0:
		return fmt.Errorf("%w: --allow-uid is for --socket: TCP has no peer uid; give --token-file or --tls-client-ca", errUsage)
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	case f.tlsClientCA != "" && f.tlsCert == "":
		return fmt.Errorf("%w: --tls-client-ca needs the relay's own --tls-cert and --tls-key", errUsage)
	}
	return nil
}

// open opens the listener the flags name and returns it with what to call
// it.
func (f *relayFlags) open() (net.Listener, string, error) {
	if f.socket != "" {
		l, err := relay.Listen(f.socket, f.allow...)
		return l, f.socket, err
	}
	var a relay.TCPAuth
	if f.tokenFile != "" {
		tok, err := relay.ReadTokenFile(f.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("%w: --token-file: %w", errUsage, err)
		}
		a.Token = tok
	}
	if f.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, "", fmt.Errorf("%w: --tls-cert, --tls-key: %w", errUsage, err)
		}
		a.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	}
	if f.tlsClientCA != "" {
		pem, err := os.ReadFile(f.tlsClientCA)
		if err != nil {
			return nil, "", fmt.Errorf("%w: --tls-client-ca: %w", errUsage, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("%w: --tls-client-ca %s: no PEM certificate in it", errUsage, f.tlsClientCA)
		}
		a.TLS.ClientCAs = pool
	}
	l, err := relay.ListenTCP(f.listen, a)
	if errors.Is(err, relay.ErrNoCredential) || errors.Is(err, relay.ErrCleartext) {
		err = fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return nil, "", err
	}
	return l, l.Addr().String(), nil
}
