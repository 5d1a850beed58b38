// Package stall bounds how long an HTTP request's body, or its response's
// body, may make no progress on a store's own transport: a peer that stops
// taking or sending bytes mid-body fails the request with a timeout (which
// the stores classify as retryable) within the limit, however long the
// body is, where nothing else would cut it before the request's deadline.
package stall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// writeSlice is the most a connection writes under one deadline, so that
// the limit measures progress, not the time a whole body takes: a write of
// one slice blocks only while the socket cannot take writeSlice bytes.
const writeSlice = 64 << 10

// Error is a body that made no progress for Limit. It is a net.Error whose
// Timeout is true, so a store's classification retries the request; it
// wraps no context error, which would read as the caller's own deadline.
type Error struct {
	Endpoint string        // host:port
	What     string        // "request body" or "response body"
	Key      string        // the configuration key of the limit, e.g. first_byte_timeout
	Limit    time.Duration // the limit
}

func (e *Error) Error() string {
	verb := "taken"
	if e.What == "response body" {
		verb = "received"
	}
	return fmt.Sprintf("endpoint %s: %s stalled, not one byte %s for %s %v", e.Endpoint, e.What, verb, e.Key, e.Limit)
}

// Timeout reports true: a stall is a timeout.
func (e *Error) Timeout() bool { return true }

// Temporary reports true: the same request may go through on another
// connection.
func (e *Error) Temporary() bool { return true }

// Dial wraps dial so that a write on one of its connections fails with
// *Error once the peer has taken nothing for limit: a peer that drops
// packets mid-upload makes the socket buffer fill and the write block. A
// slow link that takes bytes is never cut. Reads are left alone: the
// transport keeps a read pending on every idle connection (Transport
// bounds the reads of response bodies).
func Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error), limit time.Duration, key string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c, stall: Error{Endpoint: addr, What: "request body", Key: key, Limit: limit}}, nil
	}
}

type conn struct {
	net.Conn
	stall Error
}

func (c *conn) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		end := min(len(p), n+writeSlice)
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.stall.Limit)); err != nil {
			return n, err
		}
		m, err := c.Conn.Write(p[n:end])
		n += m
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				e := c.stall
				return n, &e
			}
			return n, err
		}
	}
	return n, nil
}

// Transport wraps next so that a Read of a response body that gets
// nothing for limit fails with *Error (the request is cancelled under
// it). The caller must close every response body, as with any transport.
func Transport(next http.RoundTripper, limit time.Duration, key string) http.RoundTripper {
	return &transport{next: next, limit: limit, key: key}
}

type transport struct {
	next  http.RoundTripper
	limit time.Duration
	key   string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return resp, err
	}
	resp.Body = &body{rc: resp.Body, cancel: cancel, stall: Error{Endpoint: req.URL.Host, What: "response body", Key: t.key, Limit: t.limit}}
	return resp, nil
}

// CloseIdleConnections passes the call on, so that a client's
// CloseIdleConnections reaches the transport underneath.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// body arms a timer around every Read; if it fires first, the request's
// context is cancelled, which ends the Read, and the Read reports the
// stall instead of the cancellation.
type body struct {
	rc     io.ReadCloser
	cancel context.CancelFunc
	stall  Error

	mu      sync.Mutex
	stalled bool
}

func (b *body) Read(p []byte) (int, error) {
	timer := time.AfterFunc(b.stall.Limit, func() {
		b.mu.Lock()
		b.stalled = true
		b.mu.Unlock()
		b.cancel()
	})
	n, err := b.rc.Read(p)
	if !timer.Stop() {
		b.mu.Lock()
		stalled := b.stalled
		b.mu.Unlock()
		if stalled && err != nil && err != io.EOF {
			e := b.stall
			return n, &e
		}
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.cancel()
	return err
}

// Classified returns rc, read through r (rc itself, or a limit on it),
// with every error met while reading but io.EOF passed through classify:
// a store names it as its own, so that a reader cut off mid-stream learns
// that it may retry the rest. Closing it closes rc.
func Classified(rc io.ReadCloser, r io.Reader, classify func(error) error) io.ReadCloser {
	return &classified{r: r, rc: rc, classify: classify}
}

type classified struct {
	r        io.Reader
	rc       io.ReadCloser
	classify func(error) error
}

func (b *classified) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = b.classify(fmt.Errorf("read body: %w", err))
	}
	return n, err
}

func (b *classified) Close() error { return b.rc.Close() }
