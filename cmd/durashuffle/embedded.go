package main

import (
	"context"
	"fmt"
	"os"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/uploader"
)

// startEmbedded starts the in-process S3 server with cfg's bucket and
// points cfg at it. Objects live in dataDir, or in a temporary directory
// that stop removes.
func (a *app) startEmbedded(dataDir string, cfg *durashuffle.Config) (stop func(), err error) {
	dir, temp := dataDir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "durashuffle-s3-"); err != nil {
			return nil, err
		}
		temp = true
	}
	srv, err := embedded.Start(dir, cfg.Bucket)
	if err != nil {
		if temp {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	cfg.Endpoint, cfg.PathStyle = srv.Endpoint(), true
	a.log.Info("embedded S3 server started", "endpoint", srv.Endpoint(), "data_dir", dir, "bucket", cfg.Bucket)
	return func() {
		if err := srv.Close(); err != nil {
			a.log.Warn("embedded S3 server stop", "err", err)
		}
		if temp {
			if err := os.RemoveAll(dir); err != nil {
				a.log.Warn("remove embedded data dir", "dir", dir, "err", err)
			}
		}
	}, nil
}

// connect opens a client on cfg's endpoint, creating the bucket if it is
// missing; or, with embedded, on an in-process S3 server started for it
// (cfg is pointed at it). close stops the client and the server.
func (a *app) connect(ctx context.Context, cfg *durashuffle.Config, embedded bool, dataDir string, obs uploader.Observer) (c *durashuffle.Client, close func(), err error) {
	stopServer := func() {}
	opts := durashuffle.StoreOptions(*cfg, nil)
	if embedded {
		if stopServer, err = a.startEmbedded(dataDir, cfg); err != nil {
			return nil, nil, err
		}
		opts = durashuffle.StoreOptions(*cfg, nil)
		// The embedded server checks no signatures: fixed keys spare the
		// SDK a walk down the credential chain and its metadata timeouts.
		opts.AccessKeyID, opts.SecretAccessKey = "durashuffle", "durashuffle"
	}
	counter := &store.Counter{}
	opts.Counter = counter
	s3, err := s3store.New(ctx, opts)
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	if !embedded {
		if err := s3.EnsureBucket(ctx); err != nil {
			stopServer()
			return nil, nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
		}
	}
	c = durashuffle.NewClient(s3, *cfg, counter, obs)
	return c, func() { c.Close(); stopServer() }, nil
}
