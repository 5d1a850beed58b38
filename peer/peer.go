// Package peer fetches committed frames' stored bytes from the sidecar
// that wrote them, over Arrow Flight, before a reader falls back to the
// object store. A *Client is a reader.Source: give it to
// durashuffle.Client.UsePeers, or the sidecar uses one itself.
package peer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/reader"
)

// Action is the DoAction type of the peer protocol. Its body is a
// FetchRequest as JSON; the answer is a stream of Results whose bodies,
// concatenated, are exactly the requested bytes, each at most
// MaxResultBytes. A sidecar that does not hold them answers NotFound; it
// never reads the object store on a peer's behalf.
const Action = "fetch"

// MaxResultBytes bounds one Result of a fetch.
const MaxResultBytes = 1 << 20

// fetchWindow is the gRPC flow-control window of each fetch.
const fetchWindow = 8 << 20

// MaxFetchBytes bounds the length of one fetch.
const MaxFetchBytes = 1 << 30

// FetchRequest names bytes [offset, offset+length) of data object
// `object` (its index in the worker manifest) of a committed worker
// attempt.
type FetchRequest struct {
	Query   string `json:"query"`
	Stage   int    `json:"stage"`
	Worker  string `json:"worker"`
	Attempt string `json:"attempt"`
	Object  int    `json:"object"`
	Offset  int64  `json:"offset"`
	Length  int64  `json:"length"`
}

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
	cc        *grpc.ClientConn
	fc        flight.FlightServiceClient
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
		errs = append(errs, cn.cc.Close())
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
	creds := insecure.NewCredentials()
	if c.o.TLS != nil {
		creds = credentials.NewTLS(c.o.TLS)
	}
	// Fixed windows as large as a typical fetch: gRPC's default 64 KiB
	// window, grown by its BDP estimate only after several round trips,
	// would turn a 4 MiB fetch over a 2 ms link into dozens of round
	// trips. The reader's window already bounds the bytes in flight.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithInitialWindowSize(fetchWindow), grpc.WithInitialConnWindowSize(4*fetchWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*MaxResultBytes)))
	if err != nil {
		return nil, &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("peer %s: %w", addr, err)}
	}
	cn := &conn{cc: cc, fc: flight.NewFlightServiceClient(cc)}
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
	if r.Length < 0 || r.Length > MaxFetchBytes {
		return nil, "", &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("fetch of %d bytes: at most %d", r.Length, MaxFetchBytes)}
	}
	cn, err := c.conn(r.Peer)
	if err != nil {
		return nil, "", err
	}
	body, _ := json.Marshal(FetchRequest{Query: r.Query, Stage: r.Stage, Worker: r.Worker, Attempt: r.Attempt,
		Object: r.Object, Offset: r.Offset, Length: r.Length})
	// Only this client's own token goes to the peer: metadata the
	// caller's context carries for other calls is not passed on.
	md := metadata.MD{}
	if c.o.Token != "" {
		md.Set("authorization", "Bearer "+c.o.Token)
	}
	ctx = metadata.NewOutgoingContext(ctx, md)
	what := fmt.Sprintf("peer %s: %s bytes [%d, %d)", r.Peer, r.Key, r.Offset, r.Offset+r.Length)
	stream, err := cn.fc.DoAction(ctx, &flight.Action{Type: Action, Body: body})
	if err != nil {
		return nil, "", c.failure(ctx, r.Peer, what, err)
	}
	buf := make([]byte, 0, r.Length)
	for {
		res, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, "", c.failure(ctx, r.Peer, what, err)
		}
		if int64(len(buf)+len(res.GetBody())) > r.Length {
			return nil, "", &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("%s: answered more than %d bytes", what, r.Length)}
		}
		buf = append(buf, res.GetBody()...)
	}
	if int64(len(buf)) != r.Length {
		return nil, "", &reader.SourceError{Reason: reader.FallbackError, Err: fmt.Errorf("%s: answered %d bytes, want %d", what, len(buf), r.Length)}
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
