package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// bin is the durashuffle binary built by TestMain, bench included (as
// make build builds it).
var bin string

func TestMain(m *testing.M) {
	// Next to the test binary, in go test's work directory, which go test
	// removes afterwards; testenv.Main exits, so no defer would run.
	dir := filepath.Dir(os.Args[0])
	if !strings.Contains(dir, "go-build") {
		d, err := os.MkdirTemp("", "durashuffle-cli-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		dir = d
	}
	bin = filepath.Join(dir, "durashuffle")
	out, err := exec.Command("go", "build", "-tags", "bench", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	testenv.Main(m)
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with args, env added to a cleaned environment, and
// stdin. It fails the test if the binary cannot be run or times out.
func cli(t *testing.T, env []string, stdin []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = baseEnv(env)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run durashuffle %s: %v\n%s", strings.Join(args, " "), err, se.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("durashuffle %s timed out\n%s", strings.Join(args, " "), se.String())
	}
	return r
}

// baseEnv is the test's environment without DURASHUFFLE_* settings and
// AWS profiles that could change what the binary does, plus env.
func baseEnv(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "DURASHUFFLE_") || k == "AWS_PROFILE" || k == "AWS_ENDPOINT_URL" || k == "AWS_ENDPOINT_URL_S3" {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE="+os.DevNull, "AWS_SHARED_CREDENTIALS_FILE="+os.DevNull)
	return append(out, env...)
}

// must fails the test unless r exited 0.
func (r result) must(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
	}
	return r
}

// decode parses r's stdout as JSON into v.
func (r result) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("stdout is not the expected JSON: %v\n%s", err, r.stdout)
	}
}

// backend is a server the CLI tests run against.
type backend struct {
	name string
	get  func(testing.TB) testenv.Endpoint
}

// backends: the embedded server, MinIO and versitygw (indexes 0 and 1 are
// always the embedded server and MinIO).
var backends = func() []backend {
	var out []backend
	for _, b := range testenv.Backends() {
		out = append(out, backend{b.Name, b.Start})
	}
	return out
}()

// target is an endpoint with the flags and environment that reach it.
type target struct {
	ep    testenv.Endpoint
	flags []string
	env   []string
}

func newTarget(t *testing.T, b backend) target {
	ep := b.get(t)
	tg := target{ep: ep, flags: []string{"--endpoint", ep.URL, "--bucket", ep.Bucket}}
	if ep.PathStyle {
		tg.flags = append(tg.flags, "--path-style")
	}
	if ep.Region != "" {
		tg.flags = append(tg.flags, "--region", ep.Region)
	}
	if ep.AccessKeyID != "" {
		tg.env = []string{"AWS_ACCESS_KEY_ID=" + ep.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + ep.SecretAccessKey}
	} else {
		// The MinIO testenv started put its keys in our environment.
		tg.env = []string{"AWS_ACCESS_KEY_ID=" + os.Getenv("AWS_ACCESS_KEY_ID"), "AWS_SECRET_ACCESS_KEY=" + os.Getenv("AWS_SECRET_ACCESS_KEY")}
	}
	return tg
}

// run runs a command against the target: args, then the target's flags.
func (tg target) run(t *testing.T, stdin []byte, args ...string) result {
	t.Helper()
	return cli(t, tg.env, stdin, append(args, tg.flags...)...)
}

// countingServer answers every request with 500 and counts them: a
// command pointed at it must make no request at all.
func countingServer(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "unexpected request", http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}
