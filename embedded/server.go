package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/spf13/afero"
)

// Server is a running embedded S3 server. Any access key is accepted; the
// server does not check signatures.
type Server struct {
	srv      *http.Server
	endpoint string
	served   chan error
	tempDir  string // removed by Close; "" when the caller gave dataDir
}

// Start serves the objects under dataDir (created if missing) on a free
// loopback port, creating the given buckets if they do not exist yet.
// Objects persist in dataDir across restarts; open multipart uploads do not.
// An empty dataDir is a new temporary directory that Close removes, for a
// test or a trial:
//
//	srv, err := embedded.Start("", "shuffle")
//	defer srv.Close()
//	cfg.Bucket, cfg.Endpoint, cfg.PathStyle = "shuffle", srv.Endpoint(), true
//	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(embedded.Credentials()))
func Start(dataDir string, buckets ...string) (*Server, error) {
	temp := ""
	if dataDir == "" {
		d, err := os.MkdirTemp("", "durashuffle-embedded-")
		if err != nil {
			return nil, fmt.Errorf("embedded: data dir: %w", err)
		}
		dataDir, temp = d, d
	}
	s, err := start(dataDir, buckets)
	if err != nil {
		if temp != "" {
			os.RemoveAll(temp)
		}
		return nil, err
	}
	s.tempDir = temp
	return s, nil
}

// Credentials are keys for the server's clients: it accepts any, and
// fixed ones spare the SDK a walk down the credential chain (and its
// instance-metadata timeouts) where no AWS credentials are set.
func Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider("durashuffle", "durashuffle", "")
}

func start(dataDir string, buckets []string) (*Server, error) {
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

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("embedded: listen: %w", err)
	}
	s := &Server{
		srv: &http.Server{
			Handler:           emptyUploadLists(checkBodies(faker.Server())),
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
