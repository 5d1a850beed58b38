package sidecar

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/peer"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Flow-control windows of every connection and stream. gRPC's default
// dynamic (BDP) windows grow to 16 MiB per stream; fixed ones bound what a
// client can push ahead of a stream that is blocked on the upload budget:
// at most streamWindow unread bytes per stream, plus the one message being
// assembled (at most max_message_bytes). On loopback 1 MiB is far above
// the bandwidth-delay product, so it costs no throughput.
const (
	streamWindow = 1 << 20
	connWindow   = 16 << 20
)

// defaultReadyInterval is how often the bucket is probed for /readyz.
const defaultReadyInterval = 5 * time.Second

// gRPC keepalive of every connection. The server pings a connection that
// has been quiet for keepaliveTime and closes it when the ping is not
// answered within keepaliveTimeout, so the streams of a client whose host
// vanished (no FIN, no RST) end and free their slots. Clients may ping as
// often as every keepaliveMinClientPing, with or without a stream open; a
// client that pings more often is disconnected (gRPC's GOAWAY
// "too_many_pings").
const (
	keepaliveTime          = time.Minute
	keepaliveTimeout       = 20 * time.Second
	keepaliveMinClientPing = 10 * time.Second
)

// handshakeTimeout is how long a new connection has to finish its TLS
// and HTTP/2 handshakes: one that sends nothing (a port scan, a load
// balancer's TCP check) is closed then rather than held, and a shutdown
// does not wait on it.
const handshakeTimeout = 10 * time.Second

// Options configure a Server beyond the client's configuration.
type Options struct {
	// Logger receives stream outcomes and lifecycle events; nil discards.
	// The auth token is never logged.
	Logger *slog.Logger
	// Metrics receives the sidecar's and the store's metrics and is served
	// on /metrics. Build the client with the same Metrics as its upload
	// Observer to get the pool's metrics too. nil: a fresh one (without
	// the pool's metrics).
	Metrics *metrics.Metrics
	// readyInterval is how often the bucket is probed for /readyz
	// (default defaultReadyInterval).
	readyInterval time.Duration
	// Mem allocates decoded records (default the Go allocator).
	Mem memory.Allocator
}

// Server is the Flight service on a durashuffle.Client. The client's
// configuration supplies the sidecar keys: listen, metrics_listen,
// auth_token, max_streams, max_message_bytes, shutdown_grace. Create it
// with New, serve with Serve (and ServeMetrics), stop with Shutdown.
// Safe for concurrent use.
type Server struct {
	flight.BaseFlightServer

	c        *durashuffle.Client
	cfg      durashuffle.Config
	log      *slog.Logger
	m        *metrics.Metrics
	st       store.Store // the client's store, bytes read counted
	mem      memory.Allocator
	rd       reader.Options
	tokenSum *[sha256.Size]byte // nil: no auth
	tls      *tls.Config        // nil: plaintext ports

	grpc   *grpc.Server
	slots  *semaphore.Weighted
	stages stageCache

	firstTimeout time.Duration // stream_first_message_timeout; 0: none
	idleTimeout  time.Duration // stream_idle_timeout; 0: none

	drain     context.Context // done once Shutdown starts
	drainNow  context.CancelFunc
	hard      context.Context // done when the grace ends: streams abort
	hardStop  context.CancelCauseFunc
	cut       atomic.Int64 // DoPut streams aborted by the end of the grace
	abortErrs atomic.Int64 // aborts whose cleanup failed

	mu       sync.Mutex
	active   int           // calls inside a handler
	idle     chan struct{} // closed when active drops to 0 while draining
	httpSrv  *http.Server
	shutOnce sync.Once
	shutErr  error
	shutDone chan struct{}

	ready readiness
}

var _ flight.FlightServer = (*Server)(nil)

// New builds the server on c; it listens on nothing until Serve. With
// tls_cert_file and tls_key_file set, both ports serve TLS only (and with
// tls_client_ca_file, mutual TLS); New fails if those files cannot be
// loaded. It starts probing the bucket for /readyz right away.
func New(c *durashuffle.Client, o Options) (*Server, error) {
	cfg := c.Config()
	tc, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.readyInterval <= 0 {
		o.readyInterval = defaultReadyInterval
	}
	if o.Mem == nil {
		o.Mem = memory.DefaultAllocator
	}
	o.Metrics.WatchCounter(c.Counter())
	o.Metrics.WatchConcurrency(func() int { return c.Stats().Concurrency })
	o.Metrics.WatchCommitGuard(metrics.CommitGuardStates, func() string { return string(c.CommitGuard().State) })

	gap := int64(cfg.Read.GapBytes)
	if gap == 0 {
		gap = -1 // the reader's zero means its default; the config's means "no gap"
	}
	s := &Server{
		c:        c,
		cfg:      cfg,
		log:      o.Logger,
		m:        o.Metrics,
		st:       o.Metrics.CountReads(c.Store()),
		mem:      o.Mem,
		rd:       reader.Options{RangeBytes: int64(cfg.Read.RangeBytes), ReadAhead: cfg.Read.Ahead, GapBytes: gap, Mem: o.Mem},
		slots:    semaphore.NewWeighted(int64(max(1, cfg.Sidecar.MaxStreams))),
		shutDone: make(chan struct{}),
		tls:      tc,

		firstTimeout: cfg.Sidecar.StreamFirstMessageTimeout.D(),
		idleTimeout:  cfg.Sidecar.StreamIdleTimeout.D(),
	}
	if cfg.Sidecar.AuthToken != "" {
		sum := sha256.Sum256([]byte(cfg.Sidecar.AuthToken))
		s.tokenSum = &sum
	}
	// Frames of workers that peers advertise come from them, with the
	// same bearer token as every call; the memory store serves this
	// sidecar's own. Both are only tried before S3.
	c.UsePeers(peer.New(peer.Options{Token: cfg.Sidecar.AuthToken, TLS: peerTLS(tc)}))
	fast := c.ReaderOptions()
	s.rd.Source, s.rd.SourceHedge, s.rd.SourceDelay, s.rd.Observer = fast.Source, fast.SourceHedge, fast.SourceDelay, o.Metrics
	msg := int(cfg.Sidecar.MaxMessageBytes)
	if msg <= 0 {
		msg = int(durashuffle.DefaultConfig().Sidecar.MaxMessageBytes)
	}
	s.drain, s.drainNow = context.WithCancel(context.Background())
	s.hard, s.hardStop = context.WithCancelCause(context.Background())
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.streamInterceptor),
		grpc.MaxRecvMsgSize(msg),
		grpc.MaxSendMsgSize(msg),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinClientPing, PermitWithoutStream: true}),
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	s.grpc = grpc.NewServer(opts...)
	flight.RegisterFlightServiceServer(s.grpc, s)
	s.ready.start(s, o.readyInterval)
	return s, nil
}

// TLS reports whether the ports serve TLS, and whether they require a
// client certificate.
func (s *Server) TLS() (on, mutual bool) {
	return s.tls != nil, s.tls != nil && s.tls.ClientAuth == tls.RequireAndVerifyClientCert
}

// Listen opens the Flight listener for an address in the listen key's
// syntax: host:port for TCP, unix:/path for a unix socket (a stale socket
// file left by a crashed sidecar is replaced; any other file is not).
func Listen(addr string) (net.Listener, error) {
	if strings.TrimSpace(addr) == "" {
		// net.Listen would take "" as every interface, on a random port.
		return nil, fmt.Errorf("%w: listen is empty: want host:port or unix:/path", durashuffle.ErrInvalidConfig)
	}
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, nil
	}
	if path == "" {
		return nil, fmt.Errorf("%w: listen %q: unix: needs a socket path", durashuffle.ErrInvalidConfig, addr)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another process is serving this socket", addr)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on %s: remove stale socket: %w", addr, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// isLoopback reports whether a listen address only accepts local callers:
// a unix socket or a loopback host.
func isLoopback(addr string) bool {
	if strings.HasPrefix(addr, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves Flight on ln until Shutdown; it then returns nil.
func (s *Server) Serve(ln net.Listener) error {
	if s.drain.Err() != nil {
		ln.Close()
		return nil
	}
	return s.grpc.Serve(ln)
}

// ServeMetrics serves /metrics, /healthz and /readyz on ln until Shutdown
// (over TLS when the server has it); it then returns nil.
func (s *Server) ServeMetrics(ln net.Listener) error {
	srv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)} // failed handshakes: a scanner is no error
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.mu.Lock()
	if s.drain.Err() != nil {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.httpSrv = srv
	s.mu.Unlock()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the sidecar within ctx's deadline (the caller sets the
// shutdown grace as its deadline): new calls are refused (Unavailable) and
// /readyz turns 503 at once; streams in flight may finish until the
// deadline less a cleanup reserve (reserveFor of the grace). Streams still
// running then are cut off: their writers abort in the reserve, so nothing
// of theirs is committed and no multipart upload stays open. A ctx
// cancelled early (a second signal) cuts them off at once, and the aborts
// then get the reserve from that moment. It returns nil if every call
// finished in time; an error wrapping errCutOff that counts the calls cut
// off; if aborting an output failed, one wrapping ErrCleanup; and if calls
// were still running when the reserve ended (a handler that ignores
// cancellation or a store that does not answer, logged with every
// goroutine's stack), one wrapping ErrStuck: Shutdown returns without them
// and the process should exit (what they leave is gc's). Calling it again
// waits for the first call and returns its result. The client is not
// closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		defer close(s.shutDone)
		s.shutErr = s.shutdown(ctx)
	})
	<-s.shutDone
	return s.shutErr
}

// reserveFor is the part of a shutdown grace kept for cutting off the
// streams still running and aborting their output: a third of the grace,
// at most what an abort can take (abortWait of cleanup_timeout, plus a
// second for the rest of a handler). Without a grace (0) it is that most.
func reserveFor(grace, cleanupTimeout time.Duration) time.Duration {
	most := abortWait(cleanupTimeout) + time.Second
	if grace <= 0 {
		return most
	}
	return min(grace/3, most)
}

// abortWait bounds how long a failed DoPut waits for its writer's abort:
// the abort's steps (the multipart uploads, then the objects) are each
// bounded by cleanup_timeout, so one still running after twice that, plus
// a second, is stuck. The stream then ends without it, and the abort is
// counted as a failed cleanup (what it leaves is gc's).
func abortWait(cleanupTimeout time.Duration) time.Duration {
	return 2*cleanupTimeout + time.Second
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.drainNow()
	active := s.active
	idle := make(chan struct{})
	if active == 0 {
		close(idle)
	} else {
		s.idle = idle
	}
	s.mu.Unlock()
	deadline, hasDeadline := ctx.Deadline()
	reserve := reserveFor(time.Until(deadline), s.cleanupTimeout())
	if !hasDeadline {
		reserve = reserveFor(0, s.cleanupTimeout())
	}
	cut := ctx
	if hasDeadline {
		var cancel context.CancelFunc
		cut, cancel = context.WithDeadline(ctx, deadline.Add(-reserve))
		defer cancel()
	}
	s.log.Info("shutting down: refusing new streams", "in_flight", active, "deadline", deadline, "cleanup_reserve", reserve)

	// GracefulStop waits for every handler, and holds the gRPC server's
	// lock meanwhile once the connections are gone; neither it nor Stop
	// is waited for beyond the reserve.
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	var (
		err   error
		stuck bool
	)
	select {
	case <-idle:
		select {
		case <-stopped:
		case <-cut.Done():
			// No call runs: GracefulStop waits on a connection that has
			// not finished its handshake (one that sends nothing), and
			// so does Stop, until handshakeTimeout: neither is waited
			// for beyond the reserve.
			go s.grpc.Stop()
			t := time.NewTimer(reserve)
			defer t.Stop()
			select {
			case <-stopped:
			case <-t.C:
			}
		}
	case <-cut.Done():
		s.mu.Lock()
		left := s.active
		s.mu.Unlock()
		s.log.Warn("shutdown grace ending: aborting streams still running", "streams", left, "cleanup_reserve", reserve)
		// Writers fail through their contexts, and so do the sends and
		// receives of every stream (see serverStream): a handler that
		// sees its context end returns Unavailable while its transport
		// is still open; a moment later the transports close.
		s.hardStop(errShutdown)
		t := time.NewTimer(reserve)
		defer t.Stop()
		select {
		case <-idle:
		case <-time.After(min(200*time.Millisecond, reserve/2)):
		}
		go s.grpc.Stop()
		select {
		case <-idle:
			select {
			case <-stopped:
			case <-t.C:
			}
		case <-t.C:
			stuck = true
		}
		err = fmt.Errorf("sidecar shutdown: %w: %d calls still running %v before the grace ended, %d of them DoPut streams whose output was aborted (%w)",
			errCutOff, left, reserve, s.cut.Load(), context.Cause(cut))
		if stuck {
			s.mu.Lock()
			n := s.active
			s.mu.Unlock()
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			s.log.Error("shutdown: calls still running at the end of the grace; they ignore cancellation or wait on a store that does not answer: giving up on them",
				"calls", n, "cleanup_reserve", reserve, "goroutines", stacks.String())
			err = errors.Join(err, fmt.Errorf("sidecar shutdown: %w: %d calls still running %v after they were cut off (the grace's cleanup reserve); the process must exit without them, and what they leave is gc's",
				ErrStuck, n, reserve))
		}
	}
	s.ready.stop()
	s.mu.Lock()
	srv := s.httpSrv
	s.mu.Unlock()
	if srv != nil {
		wait := 5 * time.Second
		if hasDeadline {
			wait = min(wait, max(time.Until(deadline), 100*time.Millisecond))
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		defer cancel()
		if herr := srv.Shutdown(hctx); herr != nil {
			srv.Close()
		}
	}
	if n := s.abortErrs.Load(); n > 0 {
		err = errors.Join(err, fmt.Errorf("sidecar shutdown: %w: %d streams (see the log); lifecycle rules must remove what they left", ErrCleanup, n))
	}
	s.log.Info("shut down", "cut_off", s.cut.Load(), "stuck", stuck)
	return err
}

func (s *Server) cleanupTimeout() time.Duration {
	if d := s.cfg.Write.CleanupTimeout.D(); d > 0 {
		return d
	}
	return durashuffle.DefaultConfig().Write.CleanupTimeout.D()
}

// enter registers a call; it fails while draining.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drain.Err() != nil {
		return false
	}
	s.active++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// callContext is a call's context, also cancelled with errShutdown when
// the shutdown grace ends.
func (s *Server) callContext(ctx context.Context) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.hard, func() { cancel(context.Cause(s.hard)) })
	return cctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// methodName is the Flight method of a full gRPC method name.
func methodName(full string) string {
	return full[strings.LastIndexByte(full, '/')+1:]
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	method := methodName(info.FullMethod)
	defer func() { s.finish(method, err) }()
	if !s.enter() {
		return nil, status.Error(codes.Unavailable, errShutdown.Error())
	}
	defer s.leave()
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	ctx, done := s.callContext(ctx)
	defer done()
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, s.panicked(method, r)
		} else {
			s.containedPanic(method, err)
		}
	}()
	return handler(ctx, req)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	method := methodName(info.FullMethod)
	defer func() { s.finish(method, err) }()
	if !s.enter() {
		return status.Error(codes.Unavailable, errShutdown.Error())
	}
	defer s.leave()
	if err := s.authorize(ss.Context()); err != nil {
		return err
	}
	ctx, done := s.callContext(ss.Context())
	defer done()
	// A panic in the handler fails this call alone. DoPut's own deferred
	// abort runs first, while the panic unwinds.
	defer func() {
		if r := recover(); r != nil {
			err = s.panicked(method, r)
		} else {
			s.containedPanic(method, err)
		}
	}()
	return handler(srv, s.newServerStream(method, ss, ctx))
}

// containedPanic logs and counts a panic that the library contained in
// a goroutine of its own and returned as the call's error (toStatus made
// it a panicStatus), as panicked does for one in the handler.
func (s *Server) containedPanic(method string, err error) {
	var ps *panicStatus
	if !errors.As(err, &ps) {
		return
	}
	s.m.Panic(method)
	s.log.Error("panic in a goroutine of the call: the call failed, the sidecar serves on", "method", method,
		"panic", ps.pe.Error(), "stack", string(ps.pe.Stack))
}

// panicked records a handler's panic: logged at ERROR with its stack,
// counted in durashuffle_sidecar_panics_total, and turned into the call's
// Internal status. The process serves on.
func (s *Server) panicked(method string, r any) error {
	s.m.Panic(method)
	s.log.Error("panic in handler: the call failed, the sidecar serves on", "method", method,
		"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	tail := "the call failed"
	if method == "DoPut" {
		tail = "the stream failed and its uncommitted output was aborted"
	}
	return status.Errorf(codes.Internal, "internal error in %s (a panic, logged by the sidecar): %s; %s", method, clip([]byte(fmt.Sprint(r))), tail)
}

// testHook, when set (by tests), is called at named points of handlers;
// a hook that panics or blocks plays a bug there.
var testHook atomic.Pointer[func(point string)]

func hook(point string) {
	if h := testHook.Load(); h != nil {
		(*h)(point)
	}
}

// finish records a call's outcome; failures the server is to blame for are
// logged.
func (s *Server) finish(method string, err error) {
	code := status.Code(err)
	s.m.Call(method, code.String())
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		s.log.Error("call failed", "method", method, "code", code.String(), "err", status.Convert(err).Message())
	}
}

// authorize checks the bearer token when auth_token is set. Both sides are
// hashed first so the comparison takes the same time whatever the length.
func (s *Server) authorize(ctx context.Context) error {
	if s.tokenSum == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, `missing "authorization: Bearer <token>" metadata; this sidecar requires auth_token`)
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return status.Error(codes.Unauthenticated, `authorization metadata is not "Bearer <token>"`)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	return nil
}

// acquire takes one of max_streams slots for a DoPut or DoGet, waiting
// while all are taken. A waiting stream gives up when its caller goes away
// or the sidecar starts shutting down. The returned func frees the slot.
func (s *Server) acquire(ctx context.Context, method string) (func(), error) {
	if !s.slots.TryAcquire(1) {
		s.m.StreamWaiting(1)
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.drain, cancel)
		err := s.slots.Acquire(wctx, 1)
		stop()
		cancel()
		s.m.StreamWaiting(-1)
		if err != nil {
			if ctx.Err() == nil {
				return nil, status.Error(codes.Unavailable, errShutdown.Error())
			}
			return nil, toStatus(context.Cause(ctx))
		}
	}
	s.m.StreamStarted(method)
	return func() {
		s.m.StreamDone(method)
		s.slots.Release(1)
	}, nil
}
