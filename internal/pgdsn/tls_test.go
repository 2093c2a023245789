package pgdsn

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

// testCA is a certificate authority made by the test, and the files of
// a server certificate it signed for 127.0.0.1 and localhost.
type testCA struct {
	ca, cert, key string // PEM files: the CA's certificate, the server's certificate and key
}

func writePEM(t *testing.T, path, kind string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
}

// newCA makes a CA named name in dir and, when server, a server
// certificate it signs.
func newCA(t *testing.T, dir, name string, server bool) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(der)
	c := &testCA{ca: filepath.Join(dir, name+"-ca.crt")}
	writePEM(t, c.ca, "CERTIFICATE", der, 0o644)
	if !server {
		return c
	}
	skey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	sder, err := x509.CreateCertificate(rand.Reader, stmpl, caCert, &skey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	c.cert, c.key = filepath.Join(dir, name+"-server.crt"), filepath.Join(dir, name+"-server.key")
	writePEM(t, c.cert, "CERTIFICATE", sder, 0o644)
	writePEM(t, c.key, "EC PRIVATE KEY", kder, 0o600)
	return c
}

// TestTLSAsWritten: on a cluster with TLS on and a certificate of a CA
// the test made, verify-full and verify-ca with that CA connect on every
// path a DSN takes (pgx, psql with Libpq's connection string, a client
// tool with Env's variables, a server's subscription with Libpq's
// string), and with another CA every path refuses: none falls back to an
// unverified connection.
func TestTLSAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with TLS")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		bin, berr := pglocal.BinDir()
		if berr != nil {
			t.Skip("no psql")
		}
		psql = filepath.Join(bin, "psql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "pgdsn-tls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	good, wrong := newCA(t, dir, "good", true), newCA(t, dir, "wrong", false)
	if cred, err := pglocal.PostgresUser("PostgreSQL"); err == nil && cred != nil {
		if err := os.Chown(good.key, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	set, err := pglocal.Start(ctx, pglocal.Options{N: 1, Settings: map[string]string{
		"ssl": "on", "ssl_cert_file": "'" + good.cert + "'", "ssl_key_file": "'" + good.key + "'"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Stop)
	port := set.Clusters[0].Port
	plain := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	admin, err := pgx.Connect(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE PUBLICATION tlspub`); err != nil {
		t.Fatal(err)
	}

	paths := map[string]func(dsn string) error{
		"pgx": func(dsn string) error {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return err
			}
			return c.Close(ctx)
		},
		"psql (Libpq)": func(dsn string) error {
			info, err := Libpq(dsn)
			if err != nil {
				return err
			}
			out, err := exec.CommandContext(ctx, psql, info, "-XAtc", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").CombinedOutput()
			if err == nil && strings.TrimSpace(string(out)) != "t" {
				return fmt.Errorf("connected without TLS: %s", out)
			}
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		},
		"client tool (Env)": func(dsn string) error {
			cfg, err := pgconn.ParseConfig(dsn)
			if err != nil {
				return err
			}
			cmd := exec.CommandContext(ctx, psql, "-XAtc", "SELECT 1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("PGHOST=%s", cfg.Host), fmt.Sprintf("PGPORT=%d", cfg.Port),
				"PGUSER=postgres", "PGDATABASE=postgres")
			cmd.Env = append(cmd.Env, Env(dsn, cfg)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		},
		"subscription (Libpq)": func(dsn string) error {
			info, err := Libpq(dsn)
			if err != nil {
				return err
			}
			q := fmt.Sprintf("CREATE SUBSCRIPTION tlssub CONNECTION %s PUBLICATION tlspub WITH (create_slot = false, slot_name = NONE, enabled = false, copy_data = false)", quote(info))
			if _, err := admin.Exec(ctx, q); err != nil {
				return err
			}
			_, err = admin.Exec(ctx, "DROP SUBSCRIPTION tlssub")
			return err
		},
	}
	dsn := func(host, mode, ca string) string {
		return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=%s sslrootcert=%s", host, port, mode, ca)
	}
	for _, tc := range []struct {
		name string
		dsn  string
		ok   bool
	}{
		{"verify-full, the CA", dsn("localhost", "verify-full", good.ca), true},
		{"verify-ca, the CA", dsn("127.0.0.1", "verify-ca", good.ca), true},
		{"require with the CA (verify-ca)", dsn("127.0.0.1", "require", good.ca), true},
		{"verify-full, another CA", dsn("localhost", "verify-full", wrong.ca), false},
		{"verify-ca, another CA", dsn("127.0.0.1", "verify-ca", wrong.ca), false},
		{"require with another CA (verify-ca)", dsn("127.0.0.1", "require", wrong.ca), false},
	} {
		for name, connect := range paths {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				err := connect(tc.dsn)
				if tc.ok && err != nil {
					t.Fatalf("%s: %v", tc.dsn, err)
				}
				if !tc.ok && err == nil {
					t.Fatalf("%s: connected, though the server's certificate is not of that CA", tc.dsn)
				}
			})
		}
	}
	info, err := Libpq(dsn("127.0.0.1", "verify-ca", good.ca) + " channel_binding=require sslkey=/k sslcert=/c")
	if err == nil && (!strings.Contains(info, "sslmode='verify-ca'") || !strings.Contains(info, "channel_binding='require'") ||
		!strings.Contains(info, "sslrootcert='"+good.ca+"'")) {
		t.Fatalf("Libpq dropped TLS settings: %s", info)
	}
}
