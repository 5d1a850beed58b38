package flightclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/sidecar"
)

// The sidecar the examples talk to: in-process, on loopback, over an
// embedded S3 server.
var sidecarAddr, sidecarToken string

func TestMain(m *testing.M) {
	stop, err := startSidecar()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start a sidecar:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startSidecar() (stop func(), err error) {
	ctx := context.Background()
	s3, err := embedded.Start("", "shuffle")
	if err != nil {
		return nil, err
	}
	cfg := durashuffle.DefaultConfig()
	cfg.Store.Bucket, cfg.Store.Endpoint, cfg.Store.PathStyle = "shuffle", s3.Endpoint(), true
	cfg.Sidecar.AuthToken = "example-token-0123456789"
	// Results stages expire at once, so TestGC sees gc delete one.
	cfg.GC.ResultsRetention = 0
	c, err := durashuffle.Open(ctx, cfg, durashuffle.WithCredentials(s3.Credentials()))
	if err != nil {
		s3.Close()
		return nil, err
	}
	srv, err := sidecar.New(c, sidecar.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		c.Close()
		s3.Close()
		return nil, err
	}
	ln, err := sidecar.Listen("127.0.0.1:0")
	if err != nil {
		c.Close()
		s3.Close()
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	sidecarAddr, sidecarToken = ln.Addr().String(), cfg.Sidecar.AuthToken
	return func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
		c.Close()
		s3.Close()
	}, nil
}
