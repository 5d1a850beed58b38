package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
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
	// CAFile is the PEM file of the CA that signed an https endpoint's
	// certificate (the MinIO started here), empty for the system's roots.
	CAFile string
	// certsDir holds the server's certificate and key (public.crt,
	// private.key) when this package made them, for test proxies that
	// stand in for the server.
	certsDir string
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
		CAFile:             e.CAFile,
		Counter:            c,
		AccessKeyID:        e.AccessKeyID,
		SecretAccessKey:    e.SecretAccessKey,
	}
}

// TLS reports whether the endpoint is https.
func (e Endpoint) TLS() bool { return strings.HasPrefix(e.URL, "https://") }

// Transport returns an HTTP transport that trusts the endpoint's CA, for
// a test proxy that forwards to it.
func (e Endpoint) Transport(t testing.TB) *http.Transport {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	// HTTP/1.1, as the S3 store speaks it.
	tr.ForceAttemptHTTP2 = false
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return tr
}

// ServerTLS returns the TLS configuration of a test server that stands in
// for the endpoint (a proxy in front of it) with the endpoint's own
// certificate, so that clients of Options trust it as they trust the
// endpoint; nil for a plain HTTP endpoint or one this package did not start.
func (e Endpoint) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	if e.certsDir == "" {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(e.certsDir, "public.crt"), filepath.Join(e.certsDir, "private.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// NewProxyServer starts an httptest server for h that speaks what the
// endpoint speaks: TLS with the endpoint's certificate for an https
// endpoint started here, else plain HTTP. It closes when t ends.
func (e Endpoint) NewProxyServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if cfg := e.ServerTLS(t); cfg != nil {
		srv.TLS = cfg
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
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
	// The server's own keys: it takes only requests signed with them.
	creds, err := srv.Credentials().Retrieve(context.Background())
	if err != nil {
		t.Fatalf("testenv: embedded server credentials: %v", err)
	}
	e := Endpoint{URL: srv.Endpoint(), Region: "us-east-1", PathStyle: true,
		AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey}
	return withBucket(t, e, "")
}

// MinIO returns an endpoint with a fresh bucket on a real S3 server: the
// one named by DURASHUFFLE_TEST_ENDPOINT if set, else a MinIO server this
// test binary starts with localstack/minio.sh on first use and stops in
// Main. That MinIO serves HTTPS, as S3 does, with a certificate made
// here for 127.0.0.1 by a CA made here (Endpoint.CAFile, and
// AWS_CA_BUNDLE for clients built from the AWS chain); versitygw stays
// plain HTTP, so both transports meet a real S3 implementation. The test
// fails, never skips, if no server can be had.
func MinIO(t testing.TB) Endpoint {
	t.Helper()
	if e, ok := external(); ok {
		return withBucket(t, e, os.Getenv(EnvBucket))
	}
	return minio.endpoint(t)
}

// VersityGW returns an endpoint with a fresh bucket on a versitygw
// gateway (POSIX backend) that this test binary starts with
// localstack/versitygw.sh on first use and stops in Main: the second real
// S3 implementation the suites run against. DURASHUFFLE_TEST_ENDPOINT does
// not change it (Backends leaves it out instead). It fails, never skips,
// if the gateway cannot be started.
func VersityGW(t testing.TB) Endpoint {
	t.Helper()
	return versitygw.endpoint(t)
}

// Backend is one server the end-to-end suites run against.
type Backend struct {
	Name  string // "embedded", "minio", "versitygw"; a subtest name
	Start func(testing.TB) Endpoint
}

// Backends returns every server an end-to-end suite runs against, in this
// order: the embedded server, MinIO and versitygw. Index 0 is always the
// embedded server and index 1 a real MinIO (or the external endpoint).
// With DURASHUFFLE_TEST_ENDPOINT set there is no versitygw entry: the
// external endpoint takes the place of the servers started here, and
// running every suite twice against it would prove nothing more.
func Backends() []Backend {
	b := []Backend{{"embedded", Embedded}, {"minio", MinIO}}
	if _, ok := external(); !ok {
		b = append(b, Backend{"versitygw", VersityGW})
	}
	return b
}

// RealBackends is Backends without the embedded server: the S3
// implementations durashuffle is checked against.
func RealBackends() []Backend { return Backends()[1:] }

// external is the endpoint named by DURASHUFFLE_TEST_ENDPOINT, without a
// bucket yet.
func external() (Endpoint, bool) {
	url := os.Getenv(EnvEndpoint)
	if url == "" {
		return Endpoint{}, false
	}
	return Endpoint{
		URL:       url,
		Region:    os.Getenv(EnvRegion),
		PathStyle: os.Getenv(EnvPathStyle) != "false",
		Insecure:  os.Getenv(EnvInsecure) == "true",
	}, true
}

// Main runs the package's tests and then stops every server the test
// binary started. Call it from TestMain.
func Main(m *testing.M) {
	mainRunning.Store(true)
	code := m.Run()
	if err := stopServers(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var mainRunning atomic.Bool

// stopServers stops every server this test binary started.
func stopServers() error {
	var errs []error
	for _, s := range []*server{minio, versitygw, azurite, fakeGCS, localKMS} {
		if err := s.stop(); err != nil {
			errs = append(errs, fmt.Errorf("testenv: stop %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// Test credentials of the servers this package starts. Both servers get
// the same pair, so the AWS environment variables set for subprocesses
// (commands under test) are right for either.
const (
	testAccessKey = "durashuffle"
	testSecretKey = "durashuffle-test-secret"
)

// server is a real server (an S3 implementation or a cloud emulator)
// started by one of localstack's scripts, once per test binary.
type server struct {
	name     string   // for messages
	script   string   // under localstack/
	stateEnv string   // the script's state dir variable
	watchEnv string   // the script's watched-pid variable
	credEnv  []string // an S3 server's credential variables: access key, secret; nil: none
	certsEnv string   // the script's certificate dir variable; empty: plain HTTP

	once   sync.Once
	url    string
	err    error
	state  string // the script's state dir; empty if not started
	root   string
	caFile string // the CA of the server's certificate; empty: plain HTTP
}

var (
	minio = &server{name: "MinIO", script: "minio.sh",
		stateEnv: "DURASHUFFLE_MINIO_STATE", watchEnv: "DURASHUFFLE_MINIO_WATCH_PID",
		credEnv: []string{"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}, certsEnv: "DURASHUFFLE_MINIO_CERTS_DIR"}
	versitygw = &server{name: "versitygw", script: "versitygw.sh",
		stateEnv: "DURASHUFFLE_VERSITYGW_STATE", watchEnv: "DURASHUFFLE_VERSITYGW_WATCH_PID",
		credEnv: []string{"ROOT_ACCESS_KEY", "ROOT_SECRET_KEY"}}
)

// running starts the server on first use and returns its URL; the test
// fails, never skips, if the server cannot start.
func (s *server) running(t testing.TB) string {
	t.Helper()
	s.once.Do(s.startWithRetries)
	if s.err != nil {
		t.Fatalf("testenv: start %s: %v", s.name, s.err)
	}
	return s.url
}

// endpoint starts the server on first use and returns a fresh bucket on it.
func (s *server) endpoint(t testing.TB) Endpoint {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatalf("testenv: %s starts a server for the whole test binary and needs testenv.Main to stop it: "+
			"add `func TestMain(m *testing.M) { testenv.Main(m) }` to the package's tests", s.name)
	}
	url := s.running(t)
	return withBucket(t, Endpoint{URL: url, Region: "us-east-1", PathStyle: true, CAFile: s.caFile, certsDir: s.certsDir()}, "")
}

// startWithRetries tries a few times: on a loaded machine a start can
// fail for passing reasons (a port taken between pick and bind by another
// test binary's server). Every failure is kept for the message.
func (s *server) startWithRetries() {
	var errs []error
	for attempt := 1; attempt <= 3; attempt++ {
		s.err = nil
		s.start()
		if s.err == nil {
			return
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, s.err))
		if s.state != "" {
			os.RemoveAll(s.state)
			s.state = ""
		}
		time.Sleep(time.Second)
	}
	s.err = errors.Join(errs...)
}

func (s *server) start() {
	root, err := repoRoot()
	if err != nil {
		s.err = err
		return
	}
	state, err := os.MkdirTemp("", "durashuffle-"+strings.TrimSuffix(s.script, ".sh")+"-state-")
	if err != nil {
		s.err = err
		return
	}
	s.root, s.state = root, state
	cmd := exec.Command("bash", filepath.Join(root, "localstack", s.script), "start")
	cmd.Env = append(os.Environ(),
		s.stateEnv+"="+state,
		// If this binary dies without running Main's cleanup (a test
		// timeout panics), the script's watchdog stops the server.
		s.watchEnv+"="+strconv.Itoa(os.Getpid()),
	)
	if s.credEnv != nil {
		cmd.Env = append(cmd.Env, s.credEnv[0]+"="+testAccessKey, s.credEnv[1]+"="+testSecretKey)
	}
	if s.certsEnv != "" {
		certs := filepath.Join(state, "certs")
		if s.caFile, err = serverCertsDir(certs); err != nil {
			s.err = fmt.Errorf("certificates for %s: %w", s.name, err)
			return
		}
		cmd.Env = append(cmd.Env, s.certsEnv+"="+certs)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.err = fmt.Errorf("localstack/%s start: %w\n%s", s.script, err, stderr.String())
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "endpoint="); ok {
			s.url = strings.TrimSpace(v)
		}
	}
	if s.url == "" {
		s.err = fmt.Errorf("localstack/%s start printed no endpoint=: %q\n%s", s.script, out, stderr.String())
		return
	}
	if s.credEnv == nil {
		return
	}
	// Through the environment rather than only the Endpoint, so code under
	// test that builds its own client from the AWS chain (and commands
	// run as subprocesses) reaches the same server.
	s.err = UseTestCredentials()
	if s.err == nil && s.caFile != "" {
		// Clients built from the AWS chain, in this process and in
		// commands run as subprocesses, trust the server's CA.
		s.err = os.Setenv("AWS_CA_BUNDLE", s.caFile)
	}
}

// UseTestCredentials puts the credentials of the servers this package
// starts into the process's AWS environment, where every client built
// from the AWS chain (and every command run as a subprocess) finds them.
func UseTestCredentials() error {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": testAccessKey, "AWS_SECRET_ACCESS_KEY": testSecretKey} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	// A session token left in the environment would be sent with the
	// test keys and rejected.
	return os.Unsetenv("AWS_SESSION_TOKEN")
}

func (s *server) certsDir() string {
	if s.caFile == "" {
		return ""
	}
	return filepath.Join(s.state, "certs")
}

func (s *server) stop() error {
	if s.state == "" {
		return nil
	}
	defer os.RemoveAll(s.state)
	cmd := exec.Command("bash", filepath.Join(s.root, "localstack", s.script), "stop")
	cmd.Env = append(os.Environ(), s.stateEnv+"="+s.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localstack/%s stop: %w\n%s", s.script, err, out)
	}
	return nil
}

// repoRoot finds the repository root, where localstack/ lives, from the
// test's working directory (its package directory): the nearest directory
// above it that holds localstack/minio.sh. The command line's own module
// (cmd/durashuffle) has a go.mod of its own, so go.mod alone is not the
// mark.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "localstack", "minio.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("testenv: no localstack/minio.sh above the working directory")
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

// Credentials returns the access key and secret of the servers this
// package starts (test-only values), for a test that starts servers of
// its own, such as a MinIO cluster.
func Credentials() (accessKey, secretKey string) { return testAccessKey, testSecretKey }

// MinIOBinary returns the path of the pinned MinIO server, building it
// with localstack/minio.sh install if it is not in the cache yet.
func MinIOBinary() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "localstack", "minio.sh"), "install")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("localstack/minio.sh install: %w\n%s", err, stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("localstack/minio.sh install printed %q: %w", bin, err)
	}
	return bin, nil
}

// RepoRoot returns the repository root (where localstack/ is).
func RepoRoot() (string, error) { return repoRoot() }

// Client opens a durashuffle client on cfg with opts (usually WithStore),
// failing the test if cfg is refused. The caller closes it.
func Client(t testing.TB, cfg durashuffle.Config, opts ...durashuffle.Option) *durashuffle.Client {
	t.Helper()
	c, err := durashuffle.Open(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatalf("open client: %v", err)
	}
	return c
}
