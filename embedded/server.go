package embedded

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"
)

// Server is a running embedded S3 server. It takes only requests signed
// with its credentials (Credentials), on loopback.
type Server struct {
	srv      *http.Server
	endpoint string
	creds    aws.Credentials
	served   chan error
	tempDir  string // removed by Close; "" when the caller gave dataDir
}

// ErrNotLoopback: the address given to StartWith is not a loopback one.
// The embedded server is for trials and tests on one machine.
var ErrNotLoopback = errors.New("the embedded S3 server listens on loopback only")

// Options configure StartWith.
type Options struct {
	// DataDir holds the objects (created if missing); they persist across
	// restarts, open multipart uploads do not. Empty: a new temporary
	// directory that Close removes.
	DataDir string
	// Buckets are created if they do not exist yet.
	Buckets []string
	// Addr is the address to listen on, host:port with a loopback host
	// (127.0.0.1, ::1, localhost); anything else fails with
	// ErrNotLoopback. Empty: 127.0.0.1 and a free port.
	Addr string
	// AccessKeyID and SecretAccessKey are the one pair of credentials the
	// server takes requests signed with. Empty: a pair generated for this
	// server. Credentials returns it either way.
	AccessKeyID, SecretAccessKey string
}

// Start serves the objects under dataDir on a free loopback port, creating
// the given buckets if they do not exist yet, with fresh credentials: it is
// StartWith with those options. An empty dataDir is a new temporary
// directory that Close removes, for a test or a trial:
//
//	srv, err := embedded.Start("", "shuffle")
//	defer srv.Close()
//	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", srv.Endpoint(), true
//	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(srv.Credentials()))
func Start(dataDir string, buckets ...string) (*Server, error) {
	return StartWith(Options{DataDir: dataDir, Buckets: buckets})
}

// StartWith starts a server with o.
func StartWith(o Options) (*Server, error) {
	addr, err := loopback(o.Addr)
	if err != nil {
		return nil, err
	}
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		return nil, errors.New("embedded: give both AccessKeyID and SecretAccessKey, or neither")
	}
	creds := aws.Credentials{AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey, Source: "embedded"}
	if creds.AccessKeyID == "" {
		creds.AccessKeyID, creds.SecretAccessKey = generateKeys()
	}
	temp, dataDir := "", o.DataDir
	if dataDir == "" {
		d, err := os.MkdirTemp("", "durashuffle-embedded-")
		if err != nil {
			return nil, fmt.Errorf("embedded: data dir: %w", err)
		}
		dataDir, temp = d, d
	}
	s, err := start(dataDir, o.Buckets, addr, creds)
	if err != nil {
		if temp != "" {
			os.RemoveAll(temp)
		}
		return nil, err
	}
	s.tempDir = temp
	return s, nil
}

// loopback checks that addr (empty: 127.0.0.1:0) has a loopback host.
func loopback(addr string) (string, error) {
	if addr == "" {
		return "127.0.0.1:0", nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("embedded: address %q: want host:port on loopback, such as 127.0.0.1:9000: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("embedded: address %q: %w (127.0.0.1, ::1 or localhost): it is for trials and tests on one machine, with one pair of keys and no TLS", addr, ErrNotLoopback)
	}
	return addr, nil
}

// generateKeys makes a fresh access key ID and secret.
func generateKeys() (id, secret string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails
	return "EMBEDDED" + strings.ToUpper(hex.EncodeToString(b[:6])), base64.RawURLEncoding.EncodeToString(b[6:])
}

// Credentials are the keys the server takes requests signed with, for its
// clients (durashuffle.WithCredentials, s3store.Options.Credentials).
func (s *Server) Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(s.creds.AccessKeyID, s.creds.SecretAccessKey, "")
}

func start(dataDir string, buckets []string, addr string, creds aws.Credentials) (*Server, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data dir: %w", err)
	}
	mb, err := s3afero.MultiBucket(afero.NewBasePathFs(afero.NewOsFs(), dataDir))
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", dataDir, err)
	}
	be := &backend{mb}
	for _, b := range buckets {
		if err := gofakes3.ValidateBucketName(b); err != nil {
			return nil, fmt.Errorf("embedded: bucket %q: %w", b, err)
		}
		if err := be.CreateBucket(b); err != nil && !gofakes3.HasErrorCode(err, gofakes3.ErrBucketAlreadyExists) {
			return nil, fmt.Errorf("embedded: create bucket %q: %w", b, err)
		}
	}
	faker := gofakes3.New(be, gofakes3.WithLogger(gofakes3.DiscardLog()))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embedded: listen: %w", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("embedded: address %q listens on %s: %w", addr, ln.Addr(), ErrNotLoopback)
	}
	s := &Server{
		creds: creds,
		srv: &http.Server{
			Handler:           requireSignature(creds, time.Now, emptyUploadLists(partOrder(checkBodies(faker.Server())))),
			ReadHeaderTimeout: 30 * time.Second,
			// Clients that hang up mid-request are routine under fault
			// tests; they are not worth a line on stderr.
			ErrorLog: log.New(io.Discard, "", 0),
		},
		endpoint: "http://" + ln.Addr().String(),
		served:   make(chan error, 1),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Endpoint is the server's base URL, http://127.0.0.1:PORT. Clients must
// use path-style addressing.
func (s *Server) Endpoint() string { return s.endpoint }

// Close stops the server, waiting briefly for requests in flight.
func (s *Server) Close() error {
	// Shutdown waits up to 5 s for connections that were dialled but never
	// sent a request (Go's HTTP client opens spares under concurrency), so
	// after a short grace for requests in flight the rest are closed.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if s.tempDir != "" {
		err = errors.Join(err, os.RemoveAll(s.tempDir))
	}
	return err
}
