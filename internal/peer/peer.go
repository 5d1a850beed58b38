// Package peer fetches committed frames' stored bytes from the sidecar
// that wrote them, with the fetch action of the sidecar protocol
// (flightclient.Client.Fetch), before a reader falls back to the
// object store. A *Client is a reader.Source: give it to
// durashuffle.Client.UsePeers, or the sidecar uses one itself.
package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/reader"
)

// fetchWindow is the gRPC flow-control window of each fetch.
const fetchWindow = 8 << 20

// Options configure a Client.
type Options struct {
	// Token is the bearer token sent with every call (auth_token; empty:
	// none). It is never logged.
	Token string
	// TLS, if set, dials peers over TLS with it (and presents its
	// certificates for mutual TLS); nil dials plaintext.
	TLS *tls.Config
	// DownFor is how long a peer that could not be reached is not asked
	// again (default 2s), so a dead peer costs one failed call, not one
	// per range.
	DownFor time.Duration
}

// Client fetches ranges from peer sidecars, one gRPC connection per
// address, opened on first use. Safe for concurrent use.
type Client struct {
	o     Options
	mu    sync.Mutex
	conns map[string]*conn
}

type conn struct {
	fc        *flightclient.Client
	downUntil time.Time
}

// New returns a client; it connects to nothing until a Fetch.
func New(o Options) *Client {
	if o.DownFor <= 0 {
		o.DownFor = 2 * time.Second
	}
	return &Client{o: o, conns: map[string]*conn{}}
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cn := range c.conns {
		errs = append(errs, cn.fc.Close())
		delete(c.conns, addr)
	}
	return errors.Join(errs...)
}

func (c *Client) conn(addr string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn, ok := c.conns[addr]; ok {
		if time.Now().Before(cn.downUntil) {
			return nil, &reader.SourceError{Reason: reader.FallbackUnavailable, Err: fmt.Errorf("peer %s: not asked again until %s after failing", addr, cn.downUntil.Format(time.RFC3339Nano))}
		}
		return cn, nil
	}
	// Fixed windows as large as a typical fetch: gRPC's default 64 KiB
	// window, grown by its BDP estimate only after several round trips,
	// would turn a 4 MiB fetch over a 2 ms link into dozens of round
	// trips. The reader's window already bounds the bytes in flight.
	// The token is not the client's: Fetch sets the call's metadata.
	fc, err := flightclient.Dial(addr, flightclient.Options{TLS: c.o.TLS, DialOptions: []grpc.DialOption{
		grpc.WithInitialWindowSize(fetchWindow), grpc.WithInitialConnWindowSize(4 * fetchWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2 * flightclient.MaxResultBytes))}})
	if err != nil {
		return nil, &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("peer %s: %w", addr, err)}
	}
	cn := &conn{fc: fc}
	c.conns[addr] = cn
	return cn, nil
}

func (c *Client) markDown(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn, ok := c.conns[addr]; ok {
		cn.downUntil = time.Now().Add(c.o.DownFor)
	}
}

// Fetch asks the worker's advertised sidecar (r.Peer) for the range. It
// implements reader.Source: ErrNoSource without a peer; otherwise the
// bytes, or a *reader.SourceError whose reason says why not (miss:
// NotFound; refused: Unauthenticated or PermissionDenied; unavailable:
// not reachable or gone mid-call; timeout; error).
func (c *Client) Fetch(ctx context.Context, r reader.SourceRange) ([]byte, string, error) {
	if r.Peer == "" {
		return nil, "", reader.ErrNoSource
	}
	if r.Length < 0 || r.Length > flightclient.MaxFetchBytes {
		return nil, "", &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("fetch of %d bytes: at most %d", r.Length, flightclient.MaxFetchBytes)}
	}
	cn, err := c.conn(r.Peer)
	if err != nil {
		return nil, "", err
	}
	// Only this client's own token goes to the peer: metadata the
	// caller's context carries for other calls is not passed on.
	md := metadata.MD{}
	if c.o.Token != "" {
		md.Set("authorization", "Bearer "+c.o.Token)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	what := fmt.Sprintf("peer %s: %s bytes [%d, %d)", r.Peer, r.Key, r.Offset, r.Offset+r.Length)
	buf, err := cn.fc.Fetch(ctx, flightclient.FetchRequest{Query: r.Query, Stage: r.Stage, Worker: r.Worker, Attempt: r.Attempt,
		Object: r.Object, Offset: r.Offset, Length: r.Length})
	if err != nil {
		return nil, "", c.failure(ctx, r.Peer, what, err)
	}
	return buf, reader.SourcePeer, nil
}

// failure classifies a failed call.
func (c *Client) failure(ctx context.Context, addr, what string, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	reason := reader.FallbackError
	switch status.Code(err) {
	case codes.NotFound:
		reason = reader.FallbackMiss
	case codes.Unauthenticated, codes.PermissionDenied:
		reason = reader.FallbackRefused
	case codes.Unavailable, codes.Canceled, codes.Aborted:
		reason = reader.FallbackUnavailable
		c.markDown(addr)
	case codes.DeadlineExceeded:
		reason = reader.FallbackTimeout
	}
	return &reader.SourceError{Reason: reason, Err: fmt.Errorf("%s: %s", what, status.Convert(err).Message())}
}
