package testenv

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

// PKI is a CA made for one test, a server certificate for 127.0.0.1, ::1
// and localhost, and a client certificate, in PEM files under the test's
// temporary directory; plus a client certificate from another CA. Made
// with crypto/x509 at once, valid for an hour.
type PKI struct {
	CAFile, CertFile, KeyFile string          // PEM files: the CA, the server's certificate and key
	Roots                     *x509.CertPool  // the CA, for clients
	Client, Stranger          tls.Certificate // client certificates of the CA and of another CA
	KeyPEM                    []byte          // the server key file's contents, to search output for
}

// NewPKI makes a PKI for t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, caKey, caPEM := newCA(t, "durashuffle test CA")
	p := &PKI{CAFile: write("ca.pem", caPEM), Roots: x509.NewCertPool()}
	p.Roots.AddCert(ca)
	certPEM, keyPEM := issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "durashuffle sidecar"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.CertFile, p.KeyFile, p.KeyPEM = write("server.pem", certPEM), write("server-key.pem", keyPEM), keyPEM
	clientTmpl := func() *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: "worker-1"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	}
	var err error
	if p.Client, err = tls.X509KeyPair(issue(t, ca, caKey, clientTmpl())); err != nil {
		t.Fatal(err)
	}
	other, otherKey, _ := newCA(t, "another CA")
	if p.Stranger, err = tls.X509KeyPair(issue(t, other, otherKey, clientTmpl())); err != nil {
		t.Fatal(err)
	}
	return p
}

var serial atomic.Int64

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}
