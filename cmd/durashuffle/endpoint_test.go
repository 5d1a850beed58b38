package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestEndpointConfigErrors: an endpoint that is not an http(s) URL with a
// host, from a flag, the environment or a file, or an --endpoint given
// empty, exits 2 naming the key before any request; an endpoint that is
// not set follows the AWS chain (here AWS_ENDPOINT_URL), as before.
func TestEndpointConfigErrors(t *testing.T) {
	t.Parallel()
	const notURL = `endpoint must be empty (the AWS chain) or an http:// or https:// URL with a host, such as http://127.0.0.1:9000, got `
	file := filepath.Join(t.TempDir(), "durashuffle.yaml")
	if err := os.WriteFile(file, []byte("endpoint: 127.0.0.1:9000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"}
	write := []string{"write", "-q", "q", "-w", "0", "--partitions", "1", "-i", "-"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"not a url", nil, []string{"ls", "--endpoint", "not a url"}, notURL + `"not a url"`},
		{"empty flag", nil, []string{"ls", "--endpoint", ""}, "endpoint: --endpoint is given but empty; omit it to follow the AWS chain"},
		{"empty flag, write", nil, append(write, "--endpoint="), "--endpoint is given but empty"},
		{"no scheme", nil, append(write, "--endpoint", "127.0.0.1:9000"), notURL + `"127.0.0.1:9000"`},
		{"ftp", nil, []string{"inspect", "-q", "q", "--endpoint", "ftp://127.0.0.1"}, notURL + `"ftp://127.0.0.1"`},
		{"no host", nil, []string{"gc", "--older-than", "24h", "--endpoint", "http://"}, notURL + `"http://"`},
		{"serve", nil, []string{"serve", "--endpoint", "http://h:99999", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, notURL + `"http://h:99999"`},
		{"env", []string{"DURASHUFFLE_ENDPOINT=not a url"}, []string{"ls"}, notURL + `"not a url"`},
		{"file", nil, []string{"ls", "--config", file}, notURL + `"127.0.0.1:9000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, append(creds, tc.env...), []byte{}, append(tc.args, "--bucket", "b")...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "invalid configuration") {
				t.Fatalf("exit %d, want 2 with %q:\n%s", r.code, tc.want, r.stderr)
			}
		})
	}
	t.Run("unset follows the chain", func(t *testing.T) {
		t.Parallel()
		url, requests := countingServer(t)
		r := cli(t, append(creds, "AWS_ENDPOINT_URL="+url), nil, "ls", "--bucket", "b", "--path-style", "--retry-max-attempts", "1")
		if r.code != exitFailure || requests.Load() == 0 {
			t.Fatalf("ls with AWS_ENDPOINT_URL and no endpoint: exit %d after %d requests to it, want 1 after some:\n%s", r.code, requests.Load(), r.stderr)
		}
	})
}

// TestWriteToDeadEndpoint: write against an endpoint that drops packets,
// and against one that accepts and never answers, fails (exit 1) within a
// bound set by the timeouts instead of hanging, with an error that names
// the endpoint and the timeout's key.
func TestWriteToDeadEndpoint(t *testing.T) {
	t.Parallel()
	input := arrowFile(t, testBatches(t, 0, 100, 50))
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"drops packets", testenv.BlackHole(t), "no TCP connection within connect_timeout 200ms"},
		{"never answers", testenv.NewStall(t).Addr, "no response within first_byte_timeout 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r := cli(t, []string{"AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"}, nil, "write", "-q", "q", "-w", "0",
				"--partitions", "4", "--partition-by", "id", "-i", input,
				"--endpoint", "http://"+tc.addr, "--path-style", "--bucket", "b",
				"--connect-timeout", "200ms", "--first-byte-timeout", "1s",
				"--retry-max-attempts", "3", "--retry-base-delay", "10ms", "--retry-max-delay", "20ms", "--cleanup-timeout", "1s")
			took := time.Since(start)
			if r.code != exitFailure {
				t.Fatalf("exit %d, want 1:\n%s", r.code, r.stderr)
			}
			// The last line is the error write failed with: the commit
			// guard's probe, before any input is read, got no answer.
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			for _, want := range []string{"durashuffle: write q stage 0 worker 0: the store did not answer, nothing was written",
				"gave up after 3 attempts", "endpoint " + tc.addr + ": " + tc.want} {
				if !strings.Contains(last, want) {
					t.Errorf("the error does not say %q:\n%s", want, r.stderr)
				}
			}
			// The probe's first put, 3 attempts (no delete of a key that
			// got no answer): about 4 s with the slower timeout.
			if took > 30*time.Second {
				t.Errorf("write took %v to fail", took)
			}
		})
	}
}

// TestEmbeddedS3Loopback: serve refuses to run the embedded server on an
// address beyond loopback, as a configuration error (exit 2) naming the
// flag, and the flag without --embedded-s3.
func TestEmbeddedS3Loopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":9000", "192.0.2.7:9000"} {
		r := cli(t, nil, nil, "serve", "--embedded-s3", "--embedded-s3-listen", addr, "--listen", "127.0.0.1:0", "--metrics-listen", "")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--embedded-s3-listen "+addr) || !strings.Contains(r.stderr, "loopback only") {
			t.Errorf("serve --embedded-s3-listen %s: exit %d, want 2 naming the flag:\n%s", addr, r.code, r.stderr)
		}
	}
	r := cli(t, nil, nil, "serve", "--embedded-s3-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--embedded-s3-listen is for --embedded-s3") {
		t.Errorf("--embedded-s3-listen alone: exit %d:\n%s", r.code, r.stderr)
	}
}

// embeddedServe is a serve --embedded-s3 with a token, running until the
// test ends; s3 is its S3 endpoint.
type embeddedServe struct {
	flight, s3 string
	stderr     *syncBuffer
}

func startEmbeddedServe(t *testing.T, env []string) *embeddedServe {
	t.Helper()
	s := &embeddedServe{flight: freePort(t), s3: "http://" + freePort(t), stderr: &syncBuffer{}}
	metrics := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin, "serve", "--embedded-s3", "--embedded-s3-listen", strings.TrimPrefix(s.s3, "http://"),
		"--listen", s.flight, "--metrics-listen", metrics)
	cmd.Env = baseEnv(append(env, "DURASHUFFLE_AUTH_TOKEN=sidecar-token"))
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		cancel()
		if err != nil {
			t.Errorf("serve after SIGTERM: %v\n%s", err, s.stderr.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// The startup line says where the S3 server is.
				if want := "serving Arrow Flight on " + s.flight + ", the embedded S3 server at " + s.s3; !strings.Contains(s.stderr.String(), want) {
					t.Errorf("serve's log does not say %q:\n%s", want, s.stderr.String())
				}
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 30 s: %v\n%s", err, s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEmbeddedS3Signed: the embedded server of serve --embedded-s3 (with
// auth_token set) takes only requests signed with its credentials. With
// generated keys the sidecar's own DoPut commits, while an unsigned PUT of
// a manifest, or a client with any other keys (the fixed ones of earlier
// versions included), is refused with 403 and plants nothing; with keys
// given in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, other commands
// reach the bucket with them, and with others they do not.
func TestEmbeddedS3Signed(t *testing.T) {
	t.Parallel()
	manifest := "/durashuffle/durashuffle/planted/stage-0/worker-0/manifest.json"
	unsigned := func(t *testing.T, s3 string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, s3+manifest, strings.NewReader(`{"committed":true}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("If-None-Match", "*")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "<Code>AccessDenied</Code>") {
			t.Errorf("unsigned PUT of a manifest: %d %s, want 403 AccessDenied", resp.StatusCode, b)
		}
	}
	ls := func(t *testing.T, s3, id, secret string) result {
		return cli(t, []string{"AWS_ACCESS_KEY_ID=" + id, "AWS_SECRET_ACCESS_KEY=" + secret}, nil,
			"ls", "--endpoint", s3, "--path-style", "--bucket", "durashuffle", "--retry-max-attempts", "1")
	}

	t.Run("generated keys", func(t *testing.T) {
		t.Parallel()
		s := startEmbeddedServe(t, []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="})
		c, err := flightclient.Dial(s.flight, flightclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer sidecar-token")
		if err := putOneBatch(ctx, c, "signed"); err != nil {
			t.Fatalf("DoPut through the sidecar: %v\n%s", err, s.stderr.String())
		}
		unsigned(t, s.s3)
		r := ls(t, s.s3, "durashuffle", "durashuffle")
		if r.code != exitFailure || !strings.Contains(r.stderr, "HTTP 403") {
			t.Errorf("ls with the old fixed keys: exit %d, want 1 with a 403:\n%s", r.code, r.stderr)
		}
		if !strings.Contains(s.stderr.String(), "signed_with=") {
			t.Errorf("the log does not say which keys the server takes:\n%s", s.stderr.String())
		}
	})

	t.Run("keys from the environment", func(t *testing.T) {
		t.Parallel()
		const id, secret = "trial", "trial-secret-4d1f"
		s := startEmbeddedServe(t, []string{"AWS_ACCESS_KEY_ID=" + id, "AWS_SECRET_ACCESS_KEY=" + secret})
		unsigned(t, s.s3)
		if r := ls(t, s.s3, id, secret); r.code != exitOK {
			t.Errorf("ls with the server's keys: exit %d:\n%s", r.code, r.stderr)
		} else if strings.Contains(r.stdout, "planted") {
			t.Errorf("the refused PUT planted a query:\n%s", r.stdout)
		}
		r := ls(t, s.s3, id, "guessed")
		if r.code != exitFailure || !strings.Contains(r.stderr, "SignatureDoesNotMatch") {
			t.Errorf("ls with a wrong secret: exit %d, want 1 with SignatureDoesNotMatch:\n%s", r.code, r.stderr)
		}
		if strings.Contains(s.stderr.String(), secret) {
			t.Errorf("serve printed the secret:\n%s", s.stderr.String())
		}
	})
}
