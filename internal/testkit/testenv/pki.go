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
	cert, key, pemBytes, err := makeCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pemBytes
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := makeCert(ca, caKey, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// makeCA makes a self-signed CA valid from an hour ago for validity.
func makeCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// makeCert issues tmpl from ca, with a fresh P-256 key (PKCS #8).
func makeCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// validity is how long the certificates made here stay valid: longer
// than any test binary runs (make test's timeout is 20 minutes).
const validity = 2 * time.Hour

// serverCertsDir writes a CA and a certificate for 127.0.0.1, ::1 and
// localhost that it signed into dir, the way MinIO's --certs-dir wants
// them (public.crt, private.key, CAs/ca.crt), and returns the CA's file.
func serverCertsDir(dir string) (caFile string, err error) {
	ca, caKey, caPEM, err := makeCA("durashuffle test CA (S3 server)")
	if err != nil {
		return "", err
	}
	certPEM, keyPEM, err := makeCert(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "durashuffle test S3 server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, "CAs"), 0o700); err != nil {
		return "", err
	}
	caFile = filepath.Join(dir, "CAs", "ca.crt")
	for name, b := range map[string][]byte{"public.crt": certPEM, "private.key": keyPEM, filepath.Join("CAs", "ca.crt"): caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	return caFile, nil
}
