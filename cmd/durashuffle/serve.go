package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/memstore"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/sidecar"
)

type serveOptions struct {
	embedded bool
	dataDir  string
	s3Listen string
}

func (a *app) serveCommand() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Arrow Flight sidecar that query workers write stages to and read partitions from",
		Long: `serve runs durashuffle as a sidecar next to a query worker: an Arrow Flight
service on --listen (loopback by default, or unix:/path for a socket) and
/metrics, /healthz and /readyz on --metrics-listen.

Workers DoPut a stage's output (descriptor CMD {"query","stage","worker",
"attempt","partitions"}, every batch's app_metadata {"partition": N}; only a
last message {"commit": {"batches": B, "rows": R}} with matching counts
commits), seal it with the seal-stage action and DoGet
partitions back (ticket {"query","stage","partition"}). All streams share one
upload pool and its memory budget (max_buffered_chunks x chunk_size); a slow
store slows the clients, not the sidecar's memory. docs/sidecar.md has the
whole protocol and client examples in Go and Python.

With auth_token set (--auth-token or DURASHUFFLE_AUTH_TOKEN; the environment
keeps it out of ps) every call must carry "authorization: Bearer <token>".
With tls_cert_file and tls_key_file both ports speak TLS only; with
tls_client_ca_file too, they require a client certificate of that CA.
Listening beyond loopback without a token or without TLS is logged as a
warning.

On SIGTERM or SIGINT it refuses new streams and exits within
--shutdown-grace: streams in flight may finish in the grace less a cleanup
reserve (a third of it, at most 2 x cleanup_timeout + 2s), then the rest are
cut off: their output is not committed and their uploads are aborted. A
second signal cuts them off at once. The exit code is 0 once shut down that
way, 1 if serving or the cleanup failed, or if calls were still running at
the end of the reserve (the process exits without them).

--embedded-s3 serves from an in-process S3 server (objects in --data-dir, or
in a temporary directory removed on exit): a local trial with no setup, not
a store for production. It listens on loopback only (--embedded-s3-listen,
default a free port; any other address is refused) and takes only requests
signed with its credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY if
both are set, so that other commands and tools can reach it with them, else
a pair generated at start that only this process knows.`,
		Example: `  # A local trial on the in-process S3 server:
  durashuffle serve --embedded-s3 --listen 127.0.0.1:8815 --metrics-listen 127.0.0.1:9815

  # The same, with keys of your choice, so that ls can look at the bucket:
  export AWS_ACCESS_KEY_ID=trial AWS_SECRET_ACCESS_KEY=$(openssl rand -hex 16)
  durashuffle serve --embedded-s3 --embedded-s3-listen 127.0.0.1:9000 &
  durashuffle ls --endpoint http://127.0.0.1:9000 --path-style --bucket durashuffle

  # Next to a worker, against S3, on a unix socket, with a token:
  DURASHUFFLE_AUTH_TOKEN=$(cat /run/secrets/ds-token) \
    durashuffle serve --config /etc/durashuffle.yaml --listen unix:/run/durashuffle/flight.sock

  # On the network, with mutual TLS on both ports:
  durashuffle serve --config /etc/durashuffle.yaml --listen 10.0.0.5:8815 --metrics-listen 10.0.0.5:9815 \
    --tls-cert-file /etc/durashuffle/tls.pem --tls-key-file /etc/durashuffle/tls-key.pem \
    --tls-client-ca-file /etc/durashuffle/clients-ca.pem`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runServe(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&o.embedded, "embedded-s3", false, "serve from an in-process S3 server on loopback (bucket: --bucket, default durashuffle)")
	fs.StringVar(&o.dataDir, "data-dir", "", "with --embedded-s3: keep the objects in this directory (default: a temporary directory, removed on exit)")
	fs.StringVar(&o.s3Listen, "embedded-s3-listen", "", "with --embedded-s3: its address, host:port on loopback (default: 127.0.0.1 and a free port)")
	return cmd
}

// The sidecar's metrics are the client's Observer and take every event
// the client sends beyond the upload pool's: its readers' bytes by source
// and its memory store's counts, which /metrics exports.
var (
	_ memstore.Observer = (*metrics.Metrics)(nil)
	_ reader.Observer   = (*metrics.Metrics)(nil)
)

// ServeMemoryStoreBytes is serve's memory_store_bytes unless set.
const ServeMemoryStoreBytes = durashuffle.GiB

func (a *app) runServe(ctx context.Context, o *serveOptions) error {
	a.flags.defaults = func(c *durashuffle.Config) { c.Sidecar.MemoryStoreBytes = ServeMemoryStoreBytes }
	cfg, err := a.config()
	if err != nil {
		return err
	}
	if err := o.check(cfg); err != nil {
		return err
	}
	// Every Flight stream is a writer or a reader; all share one pool.
	a.applyMemoryLimit(cfg, durashuffle.MemoryLoad{Streams: cfg.Sidecar.MaxStreams}, o.embedded)
	m := metrics.New()

	// closeBy is when the process must be gone: the end of the shutdown
	// grace, once a shutdown started (zero: closeWait).
	var closeBy time.Time
	client, closeClient, err := a.serveClient(ctx, &cfg, o, m)
	if err != nil {
		return err
	}
	defer func() { a.closeWithin(closeWait, closeBy, closeClient) }()

	srv, ln, hln, err := a.listenSidecar(cfg, client, m)
	if err != nil {
		return err
	}
	a.logServing(cfg, o, srv, ln, hln)

	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	serving := 1
	if hln != nil {
		serving++
		go func() { served <- srv.ServeMetrics(hln) }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
		a.log.Info("signal received: draining", "grace", cfg.Sidecar.ShutdownGrace)
	case serveErr = <-served:
		serving--
		if serveErr == nil {
			serveErr = errors.New("server stopped unexpectedly")
		}
		a.log.Error("serving failed: shutting down", "err", serveErr)
	}
	closeBy = time.Now().Add(cfg.Sidecar.ShutdownGrace.D())
	return a.drain(cfg, srv, served, serving, serveErr, closeBy)
}

// check refuses flags that do not go together.
func (o *serveOptions) check(cfg durashuffle.Config) error {
	switch {
	case o.dataDir != "" && !o.embedded:
		return usagef("--data-dir is for --embedded-s3")
	case o.s3Listen != "" && !o.embedded:
		return usagef("--embedded-s3-listen is for --embedded-s3")
	case o.embedded && cfg.Store.Endpoint != "":
		return usagef("--embedded-s3 runs its own endpoint; do not set endpoint (%s) with it", cfg.Store.Endpoint)
	}
	return nil
}

// serveClient opens the sidecar's client, on the embedded S3 server with
// --embedded-s3 (which sets cfg's endpoint and bucket), with m as its
// observer; close closes it (and the embedded server).
func (a *app) serveClient(ctx context.Context, cfg *durashuffle.Config, o *serveOptions, m *metrics.Metrics) (_ *durashuffle.Client, close func(), _ error) {
	if o.embedded {
		if cfg.Store.Bucket == "" {
			cfg.Store.Bucket = defaultDemoBucket
		}
		return a.connect(ctx, cfg, &embeddedS3{dataDir: o.dataDir, listen: o.s3Listen}, m)
	}
	c, err := a.openClient(ctx, *cfg, nil, durashuffle.WithObserver(m))
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}

// listenSidecar binds the Flight port and, with metrics_listen, the
// metrics port, and makes the server; on failure nothing stays bound.
func (a *app) listenSidecar(cfg durashuffle.Config, client *durashuffle.Client, m *metrics.Metrics) (*sidecar.Server, net.Listener, net.Listener, error) {
	ln, err := sidecar.Listen(cfg.Sidecar.Listen)
	if err != nil {
		return nil, nil, nil, err
	}
	var hln net.Listener
	if cfg.Sidecar.MetricsListen != "" {
		if hln, err = net.Listen("tcp", cfg.Sidecar.MetricsListen); err != nil {
			ln.Close()
			return nil, nil, nil, fmt.Errorf("metrics_listen %s: %w", cfg.Sidecar.MetricsListen, err)
		}
	}
	srv, err := sidecar.New(client, sidecar.Options{Logger: a.log, Metrics: m})
	if err != nil {
		ln.Close()
		if hln != nil {
			hln.Close()
		}
		return nil, nil, nil, err
	}
	for _, w := range sidecar.ExposureWarnings(cfg) {
		a.log.Warn(w)
	}
	return srv, ln, hln, nil
}

// logServing says where the sidecar serves and with what settings.
func (a *app) logServing(cfg durashuffle.Config, o *serveOptions, srv *sidecar.Server, ln, hln net.Listener) {
	tlsOn, mutual := srv.TLS()
	flightAddr := ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		flightAddr = "unix:" + flightAddr
	}
	metricsAddr := ""
	if hln != nil {
		metricsAddr = "http://" + hln.Addr().String()
		if tlsOn {
			metricsAddr = "https://" + hln.Addr().String()
		}
	}
	msg := "serving Arrow Flight"
	if o.embedded {
		// The S3 port is chosen at start unless --embedded-s3-listen
		// gives it: say where other tools find the bucket.
		msg = "serving Arrow Flight on " + flightAddr + ", the embedded S3 server at " + cfg.Store.Endpoint
	}
	a.log.Info(msg, "listen", flightAddr, "metrics", metricsAddr,
		"bucket", cfg.Store.Bucket, "prefix", cfg.Store.Prefix, "endpoint", cfg.Store.Endpoint, "auth", cfg.Sidecar.AuthToken != "", "tls", tlsOn, "mtls", mutual,
		"max_streams", cfg.Sidecar.MaxStreams, "upload_concurrency", cfg.Write.UploadConcurrency,
		"memory_budget", durashuffle.Size(int64(cfg.BufferedChunks())*int64(cfg.Write.ChunkSize)),
		"memory_store", cfg.Sidecar.MemoryStoreBytes, "advertise", cfg.Sidecar.AdvertiseAddr)
}

// drain shuts the server down within the grace (closeBy), waits for the
// serving goroutines still running (serving of them, reporting on
// served), and returns the first serving error, or the shutdown's own
// when it could not clean up.
func (a *app) drain(cfg durashuffle.Config, srv *sidecar.Server, served chan error, serving int, serveErr error, closeBy time.Time) error {
	// Another signal while draining ends the grace at once.
	sctx, cancel := context.WithDeadline(context.Background(), closeBy)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			a.log.Warn("second signal: aborting streams in flight now")
			cancel()
		case <-sctx.Done():
		}
	}()
	start := time.Now()
	err := srv.Shutdown(sctx)
	// gRPC's Serve returns once its stop has waited for every handler:
	// one that Shutdown gave up on (stuck on a store that does not
	// answer) would hold the exit past the grace. Wait no longer than it.
	left := time.After(max(time.Until(closeBy), 100*time.Millisecond))
wait:
	for range serving {
		select {
		case e := <-served:
			if e != nil && serveErr == nil {
				serveErr = e
			}
		case <-left:
			a.log.Warn("the servers did not stop within the grace; exiting without them")
			break wait
		}
	}
	switch {
	case errors.Is(err, sidecar.ErrCleanup), errors.Is(err, sidecar.ErrStuck):
		return err
	case err != nil:
		a.log.Warn("shut down with streams cut off; their output was aborted", "err", err, "seconds", time.Since(start).Seconds())
	default:
		a.log.Info("shut down cleanly", "seconds", time.Since(start).Seconds())
	}
	return serveErr
}

// closeWait bounds closing the client at exit: uploads still held by calls
// that Shutdown gave up on would keep it waiting.
const closeWait = 5 * time.Second

// closeWithin runs f, waiting at most d for it, and not past by (when set)
// but for a last 100 ms.
func (a *app) closeWithin(d time.Duration, by time.Time, f func()) {
	if !by.IsZero() {
		d = min(d, max(time.Until(by), 100*time.Millisecond))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		a.log.Warn("closing the client did not finish; exiting without it", "waited", d)
	}
}
