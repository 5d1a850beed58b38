package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/embedded"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/store"
)

// Environment variables that point the tests at an existing server
// (LocalStack, AWS, a MinIO of your own) instead of starting MinIO.
// Credentials then come from the usual AWS chain.
const (
	EnvEndpoint  = "DURASHUFFLE_TEST_ENDPOINT"   // e.g. http://localhost:4566
	EnvRegion    = "DURASHUFFLE_TEST_REGION"     // default: the AWS chain, else us-east-1
	EnvPathStyle = "DURASHUFFLE_TEST_PATH_STYLE" // default true; "false" for AWS virtual-host style
	EnvBucket    = "DURASHUFFLE_TEST_BUCKET"     // one shared bucket instead of one per test
	EnvInsecure  = "DURASHUFFLE_TEST_INSECURE"   // "true": skip TLS verification
)

// Endpoint is an S3 endpoint and a bucket that exists, for one test.
type Endpoint struct {
	URL       string
	Bucket    string
	Region    string // empty: the AWS chain
	PathStyle bool
	Insecure  bool
	// AccessKeyID and SecretAccessKey are empty when credentials come from
	// the AWS chain (environment).
	AccessKeyID, SecretAccessKey string
}

// Options returns s3store options for the endpoint, counting requests in c
// (which may be nil).
func (e Endpoint) Options(c *store.Counter) s3store.Options {
	return s3store.Options{
		Bucket:             e.Bucket,
		Endpoint:           e.URL,
		Region:             e.Region,
		PathStyle:          e.PathStyle,
		InsecureSkipVerify: e.Insecure,
		Counter:            c,
		AccessKeyID:        e.AccessKeyID,
		SecretAccessKey:    e.SecretAccessKey,
	}
}

// NewStore returns a store on the endpoint's bucket and the counter that
// records its requests.
func (e Endpoint) NewStore(t testing.TB) (*s3store.Store, *store.Counter) {
	t.Helper()
	c := new(store.Counter)
	s, err := s3store.New(context.Background(), e.Options(c))
	if err != nil {
		t.Fatalf("testenv: s3store for %s: %v", e.URL, err)
	}
	return s, c
}

// Embedded starts an embedded S3 server with its data in t.TempDir(),
// stopped when t ends, and returns it with a bucket.
func Embedded(t testing.TB) Endpoint {
	t.Helper()
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: start embedded server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("testenv: close embedded server: %v", err)
		}
	})
	// The embedded server checks no signatures; fixed keys spare the SDK a
	// walk down the credential chain (and its instance-metadata timeouts).
	e := Endpoint{URL: srv.Endpoint(), Region: "us-east-1", PathStyle: true,
		AccessKeyID: "embedded", SecretAccessKey: "embedded-secret"}
	return withBucket(t, e, "")
}

// MinIO returns an endpoint with a fresh bucket on a real S3 server: the
// one named by DURASHUFFLE_TEST_ENDPOINT if set, else a MinIO server this
// test binary starts with localstack/minio.sh on first use and stops in
// Main. The test fails, never skips, if no server can be had.
func MinIO(t testing.TB) Endpoint {
	t.Helper()
	if url := os.Getenv(EnvEndpoint); url != "" {
		e := Endpoint{
			URL:       url,
			Region:    os.Getenv(EnvRegion),
			PathStyle: os.Getenv(EnvPathStyle) != "false",
			Insecure:  os.Getenv(EnvInsecure) == "true",
		}
		return withBucket(t, e, os.Getenv(EnvBucket))
	}
	if !mainRunning.Load() {
		t.Fatal("testenv: MinIO starts a server for the whole test binary and needs testenv.Main to stop it: " +
			"add `func TestMain(m *testing.M) { testenv.Main(m) }` to the package's tests")
	}
	minio.once.Do(startMinIOWithRetries)
	if minio.err != nil {
		t.Fatalf("testenv: start MinIO: %v", minio.err)
	}
	return withBucket(t, Endpoint{URL: minio.url, Region: "us-east-1", PathStyle: true}, "")
}

// Main runs the package's tests and then stops the MinIO server if one was
// started. Call it from TestMain.
func Main(m *testing.M) {
	mainRunning.Store(true)
	code := m.Run()
	if err := stopMinIO(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stop MinIO:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var mainRunning atomic.Bool

var minio struct {
	once  sync.Once
	url   string
	err   error
	state string // minio.sh's state dir; empty if not started
	root  string
}

// Test credentials for the MinIO this package starts.
const (
	minioUser     = "durashuffle"
	minioPassword = "durashuffle-test-secret"
)

// startMinIOWithRetries tries a few times: on a loaded machine a start can
// fail for passing reasons (a port taken between pick and bind by another
// test binary's server). Every failure is kept for the message.
func startMinIOWithRetries() {
	var errs []error
	for attempt := 1; attempt <= 3; attempt++ {
		minio.err = nil
		startMinIO()
		if minio.err == nil {
			return
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, minio.err))
		if minio.state != "" {
			os.RemoveAll(minio.state)
			minio.state = ""
		}
		time.Sleep(time.Second)
	}
	minio.err = errors.Join(errs...)
}

func startMinIO() {
	root, err := repoRoot()
	if err != nil {
		minio.err = err
		return
	}
	state, err := os.MkdirTemp("", "durashuffle-minio-state-")
	if err != nil {
		minio.err = err
		return
	}
	minio.root, minio.state = root, state
	cmd := exec.Command("bash", filepath.Join(root, "localstack", "minio.sh"), "start")
	cmd.Env = append(os.Environ(),
		"DURASHUFFLE_MINIO_STATE="+state,
		// If this binary dies without running Main's cleanup (a test
		// timeout panics), the script's watchdog stops the server.
		"DURASHUFFLE_MINIO_WATCH_PID="+strconv.Itoa(os.Getpid()),
		"MINIO_ROOT_USER="+minioUser,
		"MINIO_ROOT_PASSWORD="+minioPassword,
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		minio.err = fmt.Errorf("localstack/minio.sh start: %w\n%s", err, stderr.String())
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			minio.url = strings.TrimSpace(v)
		}
	}
	if minio.url == "" {
		minio.err = fmt.Errorf("localstack/minio.sh start printed no endpoint=: %q\n%s", out, stderr.String())
		return
	}
	// Through the environment rather than only the Endpoint, so code under
	// test that builds its own client from the AWS chain (and commands
	// run as subprocesses) reaches the same server.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": minioUser, "AWS_SECRET_ACCESS_KEY": minioPassword} {
		if err := os.Setenv(k, v); err != nil {
			minio.err = err
			return
		}
	}
	// A session token left in the environment would be sent with the
	// MinIO keys and rejected.
	os.Unsetenv("AWS_SESSION_TOKEN")
}

func stopMinIO() error {
	if minio.state == "" {
		return nil
	}
	defer os.RemoveAll(minio.state)
	cmd := exec.Command("bash", filepath.Join(minio.root, "localstack", "minio.sh"), "stop")
	cmd.Env = append(os.Environ(), "DURASHUFFLE_MINIO_STATE="+minio.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localstack/minio.sh stop: %w\n%s", err, out)
	}
	return nil
}

// repoRoot finds the module root, where localstack/ lives, from the test's
// working directory (its package directory).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && gomod != "" && gomod != os.DevNull {
		return filepath.Dir(gomod), nil
	}
	return "", errors.New("testenv: no go.mod above the working directory; cannot find localstack/minio.sh")
}

// withBucket sets e's bucket to shared, or to a fresh one named after t,
// and makes sure it exists.
func withBucket(t testing.TB, e Endpoint, shared string) Endpoint {
	t.Helper()
	e.Bucket = shared
	if e.Bucket == "" {
		e.Bucket = bucketName(t.Name())
	}
	s, err := s3store.New(context.Background(), e.Options(nil))
	if err != nil {
		t.Fatalf("testenv: s3store for %s: %v", e.URL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.EnsureBucket(ctx); err != nil {
		t.Fatalf("testenv: bucket %s on %s: %v", e.Bucket, e.URL, err)
	}
	return e
}

// bucketName is a valid, unique S3 bucket name that still says which test
// made it: "ds-" + the test name squeezed to [a-z0-9-] + random hex.
func bucketName(test string) string {
	var b strings.Builder
	b.WriteString("ds-")
	dash := true
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 43 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	if !dash {
		b.WriteByte('-')
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}
