// Package testcert makes certificate authorities and the certificates
// they sign, for tests of TLS with real certificates: a CA in a
// directory, then server certificates for 127.0.0.1 and localhost, and
// client certificates, each as PEM files and as a tls.Certificate.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made by a test.
type CA struct {
	File string // its certificate, PEM
	Pool *x509.CertPool
	dir  string
	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate a CA signed: its PEM files and the loaded pair.
type Pair struct {
	Cert, Key string
	TLS       tls.Certificate
}

var serial atomic.Int64

// New makes a CA named name, its certificate written in dir.
func New(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{File: filepath.Join(dir, name+"-ca.crt"), Pool: x509.NewCertPool(), dir: dir, name: name, cert: cert, key: key}
	ca.Pool.AddCert(cert)
	writePEM(t, ca.File, "CERTIFICATE", der, 0o644)
	return ca
}

// Server signs a server certificate for 127.0.0.1 and localhost.
func (ca *CA) Server(t testing.TB) Pair {
	t.Helper()
	return ca.issue(t, "localhost", x509.ExtKeyUsageServerAuth)
}

// Client signs a client certificate for cn.
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, cn string, usage x509.ExtKeyUsage) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.dir, ca.name+"-"+cn+"-"+big.NewInt(tmpl.SerialNumber.Int64()).String())
	p := Pair{Cert: base + ".crt", Key: base + ".key"}
	writePEM(t, p.Cert, "CERTIFICATE", der, 0o644)
	writePEM(t, p.Key, "EC PRIVATE KEY", kder, 0o600)
	if p.TLS, err = tls.LoadX509KeyPair(p.Cert, p.Key); err != nil {
		t.Fatal(err)
	}
	return p
}

func writePEM(t testing.TB, path, kind string, der []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		t.Fatal(err)
	}
}
