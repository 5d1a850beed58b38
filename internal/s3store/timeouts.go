package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/internal/stall"
)

// Defaults of Options.ConnectTimeout and Options.FirstByteTimeout, the
// defaults of connect_timeout and first_byte_timeout.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultFirstByteTimeout = 20 * time.Second
)

// timeouts are the store's own limits on one connection and one request.
type timeouts struct {
	connect   time.Duration // dial, and TLS handshake
	firstByte time.Duration // response headers after the request is sent; a body send with no progress
}

// timeoutError says which of the store's timeouts cut a request, at which
// endpoint, and names the configuration key. It is a net.Error whose
// Timeout is true, so the request is retried; it does not unwrap to the
// transport's error, whose context.DeadlineExceeded (a dial timeout claims
// to be one) would read as the caller's own deadline.
type timeoutError struct {
	format   string // what did not happen in time: endpoint, key, limit
	endpoint string // host:port
	key      string // connect_timeout or first_byte_timeout
	limit    time.Duration
}

func (e *timeoutError) Error() string { return fmt.Sprintf(e.format, e.endpoint, e.key, e.limit) }

func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

func (t timeouts) connectErr(addr string) error {
	return &timeoutError{"endpoint %s: no TCP connection within %s %v (down, unreachable or dropping packets)", addr, "connect_timeout", t.connect}
}

func (t timeouts) handshakeErr(addr string) error {
	return &timeoutError{"endpoint %s: no TLS handshake within %s %v", addr, "connect_timeout", t.connect}
}

func (t timeouts) firstByteErr(addr string) error {
	return &timeoutError{"endpoint %s: no response within %s %v of the request being sent", addr, "first_byte_timeout", t.firstByte}
}

// dial connects within the connect timeout and returns a connection whose
// writes fail once the peer takes nothing for the first-byte timeout
// (stall.Dial): a peer that drops packets mid-upload makes the socket
// buffer fill and the write block, which nothing else would cut before
// request_timeout.
func (t timeouts) dial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: t.connect, KeepAlive: 30 * time.Second}
	connect := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			var ne net.Error
			if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
				return nil, t.connectErr(addr)
			}
			return nil, err
		}
		return c, nil
	}
	return stall.Dial(connect, t.firstByte, "first_byte_timeout")
}

// timeoutClient is the store's HTTP client when it builds its own: the
// SDK's transport with the timeouts installed and errors naming which one
// fired. It follows no redirects, as the SDK's own client.
type timeoutClient struct {
	c  *http.Client
	tr *http.Transport
	t  timeouts
}

// newTimeoutClient takes over tr (a copy of the SDK client's transport, with
// whatever roots the AWS chain added) and installs t on it.
func newTimeoutClient(tr *http.Transport, t timeouts) *timeoutClient {
	tr.DialContext = t.dial()
	tr.TLSHandshakeTimeout = t.connect
	// Counted from the end of the request body, so a large part on a
	// slow link has all the time it needs to be sent.
	tr.ResponseHeaderTimeout = t.firstByte
	return &timeoutClient{
		c: &http.Client{
			// A response body that sends nothing for the first-byte
			// timeout is cut too, as on the Azure and GCS stores.
			Transport:     stall.Transport(tr, t.firstByte, "first_byte_timeout"),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		tr: tr,
		t:  t,
	}
}

// Do implements aws.HTTPClient. A request cut by one of the timeouts fails
// with an error that names the endpoint, what did not happen and the key;
// the idle connections are then closed, since they lead to the same peer
// and are likely as dead: the next attempt dials afresh (and fails within
// connect_timeout if the endpoint is gone) instead of waiting out the
// first-byte timeout on each pooled connection in turn.
func (c *timeoutClient) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.c.Do(req)
	if err == nil || req.Context().Err() != nil {
		return resp, err
	}
	var te *timeoutError
	var se *stall.Error
	if !errors.As(err, &te) && !errors.As(err, &se) {
		// The transport's own timeouts have unexported types; their
		// messages are stable.
		var named error
		switch msg := err.Error(); {
		case strings.Contains(msg, "timeout awaiting response headers"):
			named = c.t.firstByteErr(req.URL.Host)
		case strings.Contains(msg, "TLS handshake timeout"):
			named = c.t.handshakeErr(req.URL.Host)
		}
		if named == nil {
			return resp, err
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = &url.Error{Op: ue.Op, URL: ue.URL, Err: named}
		} else {
			err = named
		}
	}
	c.tr.CloseIdleConnections()
	return resp, err
}
