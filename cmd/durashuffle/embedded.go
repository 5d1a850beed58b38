package main

import (
	"context"
	"os"

	"github.com/durashuffle/durashuffle"
	embeddeds3 "github.com/durashuffle/durashuffle/embedded"
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
	srv, err := embeddeds3.Start(dir, cfg.Bucket)
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
	counter := &store.Counter{}
	opts := []durashuffle.Option{durashuffle.WithCounter(counter), durashuffle.WithObserver(obs)}
	if embedded {
		if stopServer, err = a.startEmbedded(dataDir, cfg); err != nil {
			return nil, nil, err
		}
		opts = append(opts, durashuffle.WithCredentials(embeddeds3.Credentials()))
	}
	if c, err = durashuffle.Open(ctx, *cfg, opts...); err != nil {
		stopServer()
		return nil, nil, err
	}
	if !embedded {
		if err := c.CreateBucket(ctx); err != nil {
			c.Close()
			stopServer()
			return nil, nil, err
		}
	}
	return c, func() { c.Close(); stopServer() }, nil
}
