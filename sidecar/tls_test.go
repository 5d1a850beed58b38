package sidecar_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/sidecar"
)

// dialWith is a Flight client of the sidecar with the given transport
// credentials.
func (e *env) dialWith(creds credentials.TransportCredentials) flight.Client {
	e.t.Helper()
	c, err := flight.NewClientWithMiddleware(e.addr, nil, nil, grpc.WithTransportCredentials(creds))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// listActions is one complete Flight call: the three actions, or the
// reason the call failed.
func listActions(c flight.Client) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.ListActions(ctx, &flight.Empty{})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		if _, err := s.Recv(); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, err
		}
		n++
	}
}

// httpsGet fetches url with a client of the given TLS configuration.
func httpsGet(url string, tc *tls.Config) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestTLS: with tls_cert_file and tls_key_file, the Flight and metrics
// ports speak TLS only: a plaintext client and a client that does not
// trust the CA are refused, a client with the CA writes and reads a stage
// and scrapes /metrics.
func TestTLS(t *testing.T) {
	p := testenv.NewPKI(t)
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.TLSCertFile, c.Sidecar.TLSKeyFile = p.CertFile, p.KeyFile
	}})
	if on, mutual := e.srv.TLS(); !on || mutual {
		t.Fatalf("TLS() = %v, %v; want TLS without client certificates", on, mutual)
	}
	ctx := context.Background()

	_, err := listActions(e.dialWith(insecure.NewCredentials()))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext client: %v, want Unavailable", err)
	}
	_, err = listActions(e.dialWith(credentials.NewTLS(&tls.Config{}))) // the system's roots only
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("client without the CA: %v, want Unavailable with a certificate error", err)
	}
	if n := gauge(t, e.m, metrics.SidecarCallsTotal, nil); n != 0 {
		t.Fatalf("%v calls reached the server through failed handshakes", n)
	}

	trusted := e.dialWith(credentials.NewTLS(&tls.Config{RootCAs: p.Roots}))
	if n, err := listActions(trusted); err != nil || n != 7 {
		t.Fatalf("client with the CA: %d actions, %v", n, err)
	}
	rec, want := genBatch("t", 0, 1000, 16)
	res, err := putWorker(ctx, flightclient.Wrap(trusted, ""), flightclient.PutCommand{Query: "q-tls", Worker: "0", Partitions: 1}, slices.Values([]partBatch{{0, rec}}))
	if err != nil || !res.Committed {
		t.Fatalf("DoPut over TLS: %+v %v", res, err)
	}
	_, got, err := doGet(ctx, trusted, map[string]any{"query": "q-tls", "stage": 0, "partition": 0})
	if err != nil || len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
		t.Fatalf("DoGet over TLS: %d rows, want %d: %v", len(got), len(want), err)
	}

	// The metrics port.
	if _, _, err := httpsGet(e.httpURL+"/metrics", &tls.Config{}); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("/metrics without the CA: %v, want a certificate error", err)
	}
	if code, body, _ := httpsGet(strings.Replace(e.httpURL, "https://", "http://", 1)+"/metrics", nil); code == http.StatusOK || strings.Contains(body, "durashuffle_") {
		t.Errorf("plaintext /metrics on the TLS port: %d, %d bytes of metrics", code, len(body))
	}
	code, body, err := httpsGet(e.httpURL+"/metrics", &tls.Config{RootCAs: p.Roots})
	if err != nil || code != http.StatusOK || !strings.Contains(body, metrics.SidecarCommitsTotal+" 1") {
		t.Fatalf("/metrics with the CA: %d %v\n%.300s", code, err, body)
	}
}

// TestMutualTLS: with tls_client_ca_file, both ports refuse a client
// without a certificate, and one whose certificate another CA signed;
// a client with a certificate of the CA gets through.
func TestMutualTLS(t *testing.T) {
	p := testenv.NewPKI(t)
	e := newEnv(t, testenv.Embedded(t), envOptions{cfg: func(c *durashuffle.Config) {
		c.Sidecar.TLSCertFile, c.Sidecar.TLSKeyFile, c.Sidecar.TLSClientCAFile = p.CertFile, p.KeyFile, p.CAFile
	}})
	if on, mutual := e.srv.TLS(); !on || !mutual {
		t.Fatalf("TLS() = %v, %v; want mutual TLS", on, mutual)
	}
	cases := []struct {
		name  string
		certs []tls.Certificate
		ok    bool
		why   string // the server's TLS alert
	}{
		{"no client certificate", nil, false, "certificate required"},
		{"a certificate of another CA", []tls.Certificate{p.Stranger}, false, "unknown certificate authority"},
		{"a certificate of the CA", []tls.Certificate{p.Client}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := &tls.Config{RootCAs: p.Roots}
			if c.certs != nil {
				// Sent whatever CAs the server asks for: Go would
				// otherwise keep back a certificate of another CA.
				tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.certs[0], nil }
			}
			before := gauge(t, e.m, metrics.SidecarCallsTotal, nil)
			n, err := listActions(e.dialWith(credentials.NewTLS(tc)))
			calls := gauge(t, e.m, metrics.SidecarCallsTotal, nil) - before
			code, body, herr := httpsGet(e.httpURL+"/readyz", tc)
			if c.ok {
				if err != nil || n != 7 || calls != 1 {
					t.Errorf("Flight: %d actions, %v calls, %v; want 7, 1 call", n, calls, err)
				}
				if herr != nil || !strings.Contains(body, "commit guard:") {
					t.Errorf("/readyz: %d %q %v", code, body, herr)
				}
				return
			}
			// With TLS 1.3 the client may write before the server's
			// alert (c.why) arrives and see a broken pipe instead: the
			// refusal is what counts, and that no call got through.
			if status.Code(err) != codes.Unavailable || calls != 0 {
				t.Errorf("Flight: %v (%v calls reached the server), want Unavailable and no call", err, calls)
			}
			if herr == nil || body != "" {
				t.Errorf("/readyz: %d %q, %v; want the handshake refused", code, body, herr)
			}
			t.Logf("refused (server alert %q): Flight: %v; HTTP: %v", c.why, err, herr)
		})
	}
}

// TestTLSConfigErrors: files that cannot be loaded stop New with an
// error naming the key and the file, and never showing what it holds.
func TestTLSConfigErrors(t *testing.T) {
	p := testenv.NewPKI(t)
	cases := []struct {
		name      string
		cert, key string
		ca        string
		want      string
	}{
		{"missing key file", p.CertFile, p.KeyFile + ".nope", "", "tls_key_file " + p.KeyFile + ".nope"},
		{"cert and key swapped", p.KeyFile, p.CertFile, "", "tls_cert_file " + p.KeyFile},
		{"CA file without a certificate", p.CertFile, p.KeyFile, p.KeyFile, "tls_client_ca_file " + p.KeyFile + " holds no PEM certificate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := durashuffle.DefaultConfig()
			cfg.Sidecar.TLSCertFile, cfg.Sidecar.TLSKeyFile, cfg.Sidecar.TLSClientCAFile = c.cert, c.key, c.ca
			_, err := sidecar.LoadTLS(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadTLS: %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY-----") || strings.Contains(err.Error(), string(p.KeyPEM[30:60])) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}

// TestExposureWarnings: a port beyond loopback without TLS, and the
// Flight port without a token, are warned about; loopback is not.
func TestExposureWarnings(t *testing.T) {
	base := durashuffle.DefaultConfig()
	cases := []struct {
		name string
		mut  func(*durashuffle.Config)
		want []string
	}{
		{"loopback", func(*durashuffle.Config) {}, nil},
		{"unix socket", func(c *durashuffle.Config) { c.Sidecar.Listen = "unix:/run/ds.sock" }, nil},
		{"all interfaces, nothing set", func(c *durashuffle.Config) { c.Sidecar.Listen = "0.0.0.0:8815" },
			[]string{"listen 0.0.0.0:8815 is beyond loopback without auth_token", "listen 0.0.0.0:8815 is beyond loopback without TLS"}},
		{"token, no TLS", func(c *durashuffle.Config) { c.Sidecar.Listen, c.Sidecar.AuthToken = "10.0.0.5:8815", "t0ken" },
			[]string{"listen 10.0.0.5:8815 is beyond loopback without TLS"}},
		{"TLS and token", func(c *durashuffle.Config) {
			c.Sidecar.Listen, c.Sidecar.AuthToken, c.Sidecar.TLSCertFile, c.Sidecar.TLSKeyFile, c.Sidecar.MetricsListen = ":8815", "t0ken", "c.pem", "k.pem", ":9815"
		}, nil},
		{"metrics beyond loopback", func(c *durashuffle.Config) { c.Sidecar.MetricsListen = "[::]:9815" },
			[]string{"metrics_listen [::]:9815 is beyond loopback without TLS"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			c.mut(&cfg)
			got := sidecar.ExposureWarnings(cfg)
			if len(got) != len(c.want) {
				t.Fatalf("warnings %q, want %d: %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start %q", got[i], w)
				}
			}
			for _, w := range got {
				if strings.Contains(w, "t0ken") {
					t.Errorf("a warning shows the token: %q", w)
				}
			}
		})
	}
}
