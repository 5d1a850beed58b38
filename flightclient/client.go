package flightclient

import (
	"context"
	"crypto/tls"
	"encoding/hex"
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
	// Key is the root encryption key (32 bytes) of the queries the
	// client writes and reads, sent with every call as KeyHeader
	// metadata: the sidecar seals the frames of its DoPuts, and opens
	// those of its DoGets, under the stage keys derived from it. Dial
	// refuses it without TLS, as the sidecar refuses it over plaintext.
	Key []byte
}

// KeyHeader is the gRPC metadata that carries a call's root encryption
// key, in hex.
const KeyHeader = "durashuffle-encryption-key"

// Client speaks the sidecar protocol over one gRPC connection. Safe for
// concurrent use.
type Client struct {
	fc    flight.Client
	token string
	key   string // Options.Key in hex; empty: none
}

// Dial returns a client of the sidecar at addr (host:port, or unix:path).
// Like grpc.NewClient it connects lazily: an unreachable sidecar fails
// the first call, with Unavailable.
func Dial(addr string, o Options) (*Client, error) {
	if o.Key != nil && o.TLS == nil {
		return nil, fmt.Errorf("sidecar %s: an encryption key is sent over TLS only: set Options.TLS", addr)
	}
	if o.Key != nil && len(o.Key) != 32 {
		return nil, fmt.Errorf("sidecar %s: an encryption key of %d bytes, want 32", addr, len(o.Key))
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.DialOptions...)
	fc, err := flight.NewClientWithMiddleware(addr, nil, nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("sidecar %s: %w", addr, err)
	}
	return &Client{fc: fc, token: o.Token, key: hex.EncodeToString(o.Key)}, nil
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

// ctx adds the bearer token and the key to the call's metadata.
func (c *Client) ctx(ctx context.Context) context.Context {
	if c.key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, KeyHeader, c.key)
	}
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
