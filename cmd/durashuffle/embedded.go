package main

import (
	"context"
	"errors"
	"os"

	"github.com/durashuffle/durashuffle"
	embeddeds3 "github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/store"
)

// embeddedS3 is where the in-process S3 server keeps its objects (empty:
// a temporary directory) and listens (empty: a free loopback port).
type embeddedS3 struct {
	dataDir string
	listen  string
}

// startEmbedded starts the in-process S3 server with cfg's bucket and
// points cfg at it. Its credentials are AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY when both are set, so other commands can sign with
// them; else a pair generated for it, which only this process knows.
// Objects live in e.dataDir, or in a temporary directory that stop removes.
func (a *app) startEmbedded(e embeddedS3, cfg *durashuffle.Config) (srv *embeddeds3.Server, stop func(), err error) {
	dir, temp := e.dataDir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "durashuffle-s3-"); err != nil {
			return nil, nil, err
		}
		temp = true
	}
	o := embeddeds3.Options{DataDir: dir, Buckets: []string{cfg.Store.Bucket}, Addr: e.listen}
	keys := "generated (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to choose them)"
	if id, secret := a.getenv("AWS_ACCESS_KEY_ID"), a.getenv("AWS_SECRET_ACCESS_KEY"); id != "" && secret != "" {
		o.AccessKeyID, o.SecretAccessKey = id, secret
		keys = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
	}
	srv, err = embeddeds3.StartWith(o)
	if err != nil {
		if temp {
			os.RemoveAll(dir)
		}
		if errors.Is(err, embeddeds3.ErrNotLoopback) {
			err = usagef("--embedded-s3-listen %s: %w", e.listen, err)
		}
		return nil, nil, err
	}
	cfg.Store.Endpoint, cfg.Store.PathStyle = srv.Endpoint(), true
	a.log.Info("embedded S3 server started", "endpoint", srv.Endpoint(), "data_dir", dir, "bucket", cfg.Store.Bucket,
		"signed_with", keys)
	return srv, func() {
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
// missing; or, with emb, on an in-process S3 server started for it (cfg is
// pointed at it). close stops the client and the server.
func (a *app) connect(ctx context.Context, cfg *durashuffle.Config, emb *embeddedS3, obs durashuffle.Observer) (c *durashuffle.Client, close func(), err error) {
	stopServer := func() {}
	counter := &store.Counter{}
	opts := []durashuffle.Option{durashuffle.WithCounter(counter), durashuffle.WithObserver(obs)}
	if emb != nil {
		var srv *embeddeds3.Server
		if srv, stopServer, err = a.startEmbedded(*emb, cfg); err != nil {
			return nil, nil, err
		}
		opts = append(opts, durashuffle.WithCredentials(srv.Credentials()))
	}
	if c, err = a.openClient(ctx, *cfg, counter, opts...); err != nil {
		stopServer()
		return nil, nil, err
	}
	if emb == nil {
		if err := c.CreateBucket(ctx); err != nil {
			c.Close()
			stopServer()
			return nil, nil, err
		}
	}
	return c, func() { c.Close(); stopServer() }, nil
}
