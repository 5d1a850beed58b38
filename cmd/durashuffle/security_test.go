package main

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSecretNeverPrinted runs every command against MinIO with debug
// logging, then with a wrong secret key, and checks that neither secret
// appears in anything the binary prints, errors included. Credentials come
// only from the AWS chain: no flag or config key takes them.
func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, backends[1])
	secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
	if len(secret) < 8 {
		t.Fatalf("MinIO's secret %q is too short to search for", secret)
	}
	const wrong = "wrong-secret-Zq8nW3pLk5Vt"
	leaks := func(t *testing.T, r result, what string) {
		t.Helper()
		for _, s := range []string{secret, wrong} {
			if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
				t.Fatalf("%s printed a secret key:\nstdout:\n%s\nstderr:\n%s", what, r.stdout, r.stderr)
			}
		}
	}
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
	r := cli(t, tg.env, nil, append([]string{"ls", "--config", file}, tg.flags...)...)
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
