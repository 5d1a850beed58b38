package flightclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Options configure a Client.
type Options struct {
	// Token is the bearer token sent with every call (the sidecar's
	// auth_token; empty: none).
	Token string
	// TLS, if set, dials over TLS with it (and presents its certificates
	// for mutual TLS); nil dials plaintext.
	TLS *tls.Config
	// DialOptions are added after the client's own, so they win: other
	// transport credentials, window sizes, message size limits.
	DialOptions []grpc.DialOption
}

// Client speaks the sidecar protocol over one gRPC connection. Safe for
// concurrent use.
type Client struct {
	fc    flight.Client
	token string
}

// Dial returns a client of the sidecar at addr (host:port, or unix:path).
// Like grpc.NewClient it connects lazily: an unreachable sidecar fails
// the first call, with Unavailable.
func Dial(addr string, o Options) (*Client, error) {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.DialOptions...)
	fc, err := flight.NewClientWithMiddleware(addr, nil, nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("sidecar %s: %w", addr, err)
	}
	return &Client{fc: fc, token: o.Token}, nil
}

// Wrap returns a client that calls through fc, a Flight client the
// caller made and closes; token is sent as the bearer token (empty:
// none).
func Wrap(fc flight.Client, token string) *Client {
	return &Client{fc: fc, token: token}
}

// Flight is the underlying Flight client, for calls this package does not
// wrap (GetSchema, ListActions).
func (c *Client) Flight() flight.Client { return c.fc }

// Close closes the connection.
func (c *Client) Close() error { return c.fc.Close() }

// ctx adds the bearer token to the call's metadata.
func (c *Client) ctx(ctx context.Context) context.Context {
	if c.token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// Action runs action typ with body marshalled as JSON and decodes its one
// result into out (nil: the result is not decoded). A failed call returns
// the sidecar's status.
func (c *Client) Action(ctx context.Context, typ string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("action %s: body: %w", typ, err)
	}
	var got [][]byte
	if err := c.action(ctx, typ, b, func(r []byte) error {
		got = append(got, r)
		return nil
	}); err != nil {
		return err
	}
	if len(got) != 1 {
		return fmt.Errorf("action %s: %d results, want 1", typ, len(got))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(got[0], out); err != nil {
		return fmt.Errorf("action %s: result %q: %w", typ, got[0], err)
	}
	return nil
}

// action runs an action and passes each result's body to each, in order.
func (c *Client) action(ctx context.Context, typ string, body []byte, each func([]byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.fc.DoAction(c.ctx(ctx), &flight.Action{Type: typ, Body: body})
	if err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := each(r.GetBody()); err != nil {
			return err
		}
	}
}
