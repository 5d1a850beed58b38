package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestSecretNeverPrinted runs every command against MinIO with debug
// logging, then with a wrong secret key, and checks that neither secret
// appears in anything the binary prints, errors included. Credentials come
// only from the AWS chain: no flag or config key takes them. Every command
// runs with a bearer token and TLS files in its environment too, so the
// JSON summaries and logs are searched for the token and the TLS key's
// contents as well; serve gets its own runs at every log level (see
// serveLeaks).
func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1])
	secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
	if len(secret) < 8 {
		t.Fatalf("MinIO's secret %q is too short to search for", secret)
	}
	const wrong = "wrong-secret-Zq8nW3pLk5Vt"
	sec := newSidecarSecrets(t)
	leaks := func(t *testing.T, r result, what string) {
		t.Helper()
		needles := map[string]string{"the AWS secret key": secret, "the wrong secret key": wrong}
		for name, s := range sec.needles() {
			needles[name] = s
		}
		for name, s := range needles {
			if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
				t.Fatalf("%s printed %s:\nstdout:\n%s\nstderr:\n%s", what, name, r.stdout, r.stderr)
			}
		}
	}
	tg.env = append(append([]string{}, tg.env...), sec.env()...)
	in := arrowStream(t, testBatches(t, 0, 2000, 500))
	debug := []string{"--log-level", "debug"}
	var printed int
	for _, args := range [][]string{
		{"write", "-q", "sec", "-w", "0", "--partitions", "2", "--partition-by", "id"},
		{"seal", "-q", "sec", "--workers", "1"},
		{"read", "-q", "sec", "--format", "jsonl", "--limit", "5"},
		{"inspect", "-q", "sec", "--json"},
		{"ls", "--json"},
		{"gc", "--older-than", "0s", "--dry-run", "--json"},
		{"delete-query", "-q", "sec"},
		{"demo", "--rows", "2000", "--workers", "1", "--partitions", "2", "--json"},
	} {
		var stdin []byte
		if args[0] == "write" {
			stdin = in
		}
		r := tg.run(t, stdin, append(args, debug...)...).must(t)
		leaks(t, r, args[0])
		printed += len(r.stderr)
	}
	if printed == 0 {
		t.Fatal("debug logging printed nothing: the test proves nothing")
	}

	// The sidecar, at every log level and in both formats, serving
	// authorized, unauthorized and plaintext callers over mutual TLS.
	for _, run := range []struct{ level, format string }{
		{"debug", "text"}, {"debug", "json"}, {"info", "text"}, {"warn", "text"}, {"error", "json"},
	} {
		t.Run("serve "+run.level+" "+run.format, func(t *testing.T) {
			r := serveLeaks(t, tg, sec, run.level, run.format)
			leaks(t, r, "serve --log-level "+run.level)
			if run.level == "debug" && !strings.Contains(r.stderr, "serving Arrow Flight") {
				t.Fatalf("serve at debug logged nothing of note: the test proves nothing\n%s", r.stderr)
			}
		})
	}
	// A key file that does not hold a key (cert and key swapped) stops
	// serve with exit 2 and names the files, not what they hold.
	swapped := append(append([]string{}, tg.env...), "DURASHUFFLE_TLS_CERT_FILE="+sec.pki.KeyFile, "DURASHUFFLE_TLS_KEY_FILE="+sec.pki.CertFile)
	r := cli(t, swapped, nil, append([]string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--log-level", "debug"}, tg.flags...)...)
	if r.code != 2 || !strings.Contains(r.stderr, "tls_cert_file "+sec.pki.KeyFile) {
		t.Fatalf("serve with the key as certificate: exit %d, want 2 naming the file:\n%s", r.code, r.stderr)
	}
	leaks(t, r, "serve with bad TLS files")

	// A request that fails on the credentials: the error says so, and
	// still shows no secret.
	env := append([]string{}, tg.env...)
	for i, kv := range env {
		if strings.HasPrefix(kv, "AWS_SECRET_ACCESS_KEY=") {
			env[i] = "AWS_SECRET_ACCESS_KEY=" + wrong
		}
	}
	for _, args := range [][]string{{"ls"}, {"gc", "--older-than", "1h"}, {"read", "-q", "sec", "--format", "jsonl"}} {
		r := cli(t, env, nil, append(append(args, tg.flags...), debug...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "SignatureDoesNotMatch") {
			t.Fatalf("%s with a wrong secret: exit %d, want 1 with SignatureDoesNotMatch:\n%s", args[0], r.code, r.stderr)
		}
		leaks(t, r, args[0]+" with a wrong secret")
	}

	// No flag, config key or DURASHUFFLE_ variable takes credentials.
	help := cli(t, nil, nil, "ls", "--help").must(t).stdout
	for _, s := range []string{"secret", "access-key", "credential"} {
		if strings.Contains(strings.ToLower(help), s) {
			t.Fatalf("ls --help mentions %q: credentials must come from the AWS chain only", s)
		}
	}
	file := filepath.Join(t.TempDir(), "creds.yaml")
	if err := os.WriteFile(file, []byte("aws_secret_access_key: "+wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, tg.env, nil, append([]string{"ls", "--config", file}, tg.flags...)...)
	if r.code != 2 || !strings.Contains(r.stderr, "field aws_secret_access_key not found") {
		t.Fatalf("a config file with a secret key: exit %d\n%s", r.code, r.stderr)
	}
	leaks(t, r, "ls --config with a secret in the file")
}

// TestTLSVerification puts a TLS endpoint with a self-signed certificate
// (a reverse proxy to MinIO) in front of the CLI: requests fail with a
// certificate error and never reach the server, unless the certificate's
// CA is trusted (AWS_CA_BUNDLE) or insecure_skip_verify is set explicitly.
func TestTLSVerification(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1])
	u, err := url.Parse(tg.ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = tg.ep.Transport(t) // MinIO speaks HTTPS with the test CA
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		rp.ServeHTTP(w, r) // Host stays the proxy's, which the request was signed for
	}))
	t.Cleanup(srv.Close)
	flags := []string{"--endpoint", srv.URL, "--bucket", tg.ep.Bucket, "--path-style", "--region", "us-east-1", "--retry-max-attempts", "1"}
	in := arrowStream(t, testBatches(t, 0, 1000, 250))

	r := cli(t, tg.env, in, append([]string{"write", "-q", "tls", "-w", "0", "--partitions", "1"}, flags...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "certificate signed by unknown authority") {
		t.Fatalf("write to a self-signed endpoint: exit %d, want 1 with a certificate error:\n%s", r.code, r.stderr)
	}
	r = cli(t, append(tg.env, "DURASHUFFLE_INSECURE_SKIP_VERIFY=false"), nil, append([]string{"ls"}, flags...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "x509") {
		t.Fatalf("ls: exit %d\n%s", r.code, r.stderr)
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests got past a failed TLS handshake", n)
	}

	// Trusting the certificate's CA through the AWS chain works with
	// verification on.
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, append(tg.env, "AWS_CA_BUNDLE="+bundle), nil, append([]string{"ls"}, flags...)...).must(t)

	// insecure_skip_verify, set explicitly: the whole round trip over TLS.
	insecure := append(flags, "--insecure-skip-verify")
	cli(t, tg.env, in, append([]string{"write", "-q", "tls", "-w", "0", "--partitions", "1"}, insecure...)...).must(t)
	cli(t, tg.env, nil, append([]string{"seal", "-q", "tls", "--workers", "1"}, insecure...)...).must(t)
	out := cli(t, tg.env, nil, append([]string{"read", "-q", "tls", "--format", "jsonl"}, insecure...)...).must(t).stdout
	if n := len(jsonLinesOf(t, out)); n != 1000 {
		t.Fatalf("read %d rows over TLS, want 1000", n)
	}
	if requests.Load() == 0 {
		t.Fatal("nothing went through the TLS endpoint")
	}
}

// sidecarSecrets are the sidecar's secrets for one test: a bearer token
// and a TLS key (with its certificate and the CA of mutual TLS).
type sidecarSecrets struct {
	token, wrongToken string
	pki               *testenv.PKI
}

func newSidecarSecrets(t *testing.T) *sidecarSecrets {
	var b [12]byte
	rand.Read(b[:])
	return &sidecarSecrets{token: "tok-" + hex.EncodeToString(b[:]), wrongToken: "wrong-tok-Hd72mXq0Lr", pki: testenv.NewPKI(t)}
}

// env is the configuration that holds the secrets, as an operator would
// set it: the token and the TLS files in DURASHUFFLE_ variables.
func (s *sidecarSecrets) env() []string {
	return []string{"DURASHUFFLE_AUTH_TOKEN=" + s.token, "DURASHUFFLE_TLS_CERT_FILE=" + s.pki.CertFile,
		"DURASHUFFLE_TLS_KEY_FILE=" + s.pki.KeyFile, "DURASHUFFLE_TLS_CLIENT_CA_FILE=" + s.pki.CAFile}
}

// needles are the strings no output may hold: both tokens, the key file
// whole, and every base64 line of its body.
func (s *sidecarSecrets) needles() map[string]string {
	out := map[string]string{"the bearer token": s.token, "the wrong bearer token": s.wrongToken,
		"the TLS key file": string(s.pki.KeyPEM), "a PEM private key header": "BEGIN PRIVATE KEY"}
	for i, line := range strings.Split(string(s.pki.KeyPEM), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			out[fmt.Sprintf("line %d of the TLS key file", i+1)] = line
		}
	}
	return out
}

// serveLeaks runs serve with the secrets at a log level, makes every kind
// of call a sidecar sees (a committed DoPut and a DoGet with the token, a
// wrong token, none, a plaintext client; /metrics and /readyz over mutual
// TLS), stops it with SIGTERM and returns everything it printed, with the
// HTTP bodies appended to stdout so they are searched too.
func serveLeaks(t *testing.T, tg target, sec *sidecarSecrets, level, format string) result {
	t.Helper()
	flightAddr, metricsAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--log-level", level, "--log-format", format,
		"--listen", flightAddr, "--metrics-listen", metricsAddr}, tg.flags...)...)
	cmd.Env = baseEnv(tg.env)
	var so, se syncBuffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	tc := &tls.Config{RootCAs: sec.pki.Roots, Certificates: []tls.Certificate{sec.pki.Client}}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	var bodies strings.Builder
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("https://" + metricsAddr + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				bodies.Write(b)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30 s: %v\n%s", err, se.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	c, err := flightclient.Dial(flightAddr, flightclient.Options{TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+sec.token)
	query := "sec-serve-" + level + "-" + format
	if err := putOneBatch(authed, c, query); err != nil {
		t.Fatalf("DoPut with the token: %v\n%s", err, se.String())
	}
	zero := 0
	get, err := c.Get(authed, flightclient.Ticket{Query: query, Stage: 0, Partition: &zero})
	if err == nil {
		get.Release()
	}
	if err != nil {
		t.Fatalf("DoGet with the token: %v", err)
	}
	for _, ctx := range []context.Context{
		metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+sec.wrongToken),
		metadata.AppendToOutgoingContext(ctx, "authorization", sec.wrongToken), // no scheme
		ctx,
	} {
		if err := putOneBatch(ctx, c, query+"-x"); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("DoPut without the right token: %v, want Unauthenticated", err)
		} else if strings.Contains(err.Error(), sec.wrongToken) || strings.Contains(err.Error(), sec.token) {
			t.Fatalf("the error shows a token: %v", err)
		}
	}
	plain, err := flightclient.Dial(flightAddr, flightclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.List(authed, ""); err == nil {
		t.Fatal("a plaintext client was served")
	}
	plain.Close()
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		resp, err := hc.Get("https://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies.Write(b)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	r := result{stdout: so.String() + bodies.String(), stderr: se.String()}
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		t.Fatalf("serve exit %d after SIGTERM\n%s", r.code, r.stderr)
	}
	return r
}

// putOneBatch DoPuts one small batch as worker 0 of query, with the
// commit message, and waits for the outcome.
func putOneBatch(ctx context.Context, c *flightclient.Client, query string) error {
	bld := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	defer bld.Release()
	bld.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := bld.NewRecordBatch()
	defer rec.Release()
	pw, err := c.Put(ctx, flightclient.PutCommand{Query: query, Stage: 0, Worker: "0", Partitions: 1}, rec.Schema())
	if err != nil {
		return err
	}
	defer pw.Abort()
	if err := pw.Write(0, rec); err != nil {
		return err
	}
	_, err = pw.Commit()
	return err
}

// freePort returns a loopback address that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer collects output from other goroutines while the test reads it.
type syncBuffer = testenv.SyncBuffer
