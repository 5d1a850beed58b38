package gcsstore

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/durashuffle/durashuffle/internal/opname"
	"github.com/durashuffle/durashuffle/internal/stall"
	"github.com/durashuffle/durashuffle/store"
)

// newTransport pools enough connections that concurrent parts and ranged
// GETs reuse them, and bounds connecting, waiting for a response's
// headers (counted from the end of the request body, so a large part on
// a slow link has all the time it needs to be sent), and a body, sent or
// received, that makes no progress.
func newTransport(o Options) http.RoundTripper {
	maxConns := o.MaxConns
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	connect, firstByte := o.ConnectTimeout, o.FirstByteTimeout
	if connect == 0 {
		connect = DefaultConnectTimeout
	}
	if firstByte == 0 {
		firstByte = DefaultFirstByteTimeout
	}
	return stall.Transport(&http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           stall.Dial((&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext, firstByte, "first_byte_timeout"),
		TLSHandshakeTimeout:   connect,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		ResponseHeaderTimeout: firstByte,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		MaxConnsPerHost:       maxConns,
		IdleConnTimeout:       90 * time.Second,
	}, firstByte, "first_byte_timeout")
}

// countingTransport records every request sent, by JSON API method and
// status (0 when no response arrived). It sits under the SDK, so with
// the SDK's retries off each call of the store is the requests it
// counts, and retries above the store show up as more.
type countingTransport struct {
	next    http.RoundTripper
	counter *store.Counter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if t.counter != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.counter.Request(opname.GCS(req), status)
	}
	return resp, err
}

// The SDK's reader sends the rest of an object again by itself when a
// response body breaks off (a retry below the retry layer, which
// RetryNever does not turn off). A read's context carries a readState,
// and readsOnce refuses any request after the first in that context with
// the error the first body broke off with: the break reaches the retry
// layer, which counts it, paces it and resumes the read itself.
type readState struct {
	mu   sync.Mutex
	sent bool
	err  error // what broke the first response's body
}

type readStateKey struct{}

// oneRequest marks ctx as a read's: one request, not resumed underneath.
func oneRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, readStateKey{}, &readState{})
}

// readsOnce enforces oneRequest on the transport next.
type readsOnce struct{ next http.RoundTripper }

func (t readsOnce) RoundTrip(req *http.Request) (*http.Response, error) {
	rs, _ := req.Context().Value(readStateKey{}).(*readState)
	if rs == nil {
		return t.next.RoundTrip(req)
	}
	rs.mu.Lock()
	sent, err := rs.sent, rs.err
	rs.sent = true
	rs.mu.Unlock()
	if sent {
		if req.Body != nil {
			req.Body.Close()
		}
		if err == nil {
			err = errors.New("the read's answer broke off")
		}
		return nil, &notResumed{err}
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		resp.Body = &brokenBody{ReadCloser: resp.Body, rs: rs}
	}
	return resp, err
}

// brokenBody records the error a response body breaks off with.
type brokenBody struct {
	io.ReadCloser
	rs *readState
}

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.rs.mu.Lock()
		b.rs.err = err
		b.rs.mu.Unlock()
	}
	return n, err
}

// notResumed is readsOnce's refusal: the error the first body broke off
// with, a timeout if that was one (the HTTP client's url.Error asks its
// direct cause, not the chain).
type notResumed struct{ err error }

func (e *notResumed) Error() string {
	return "not resuming a read below the retry layer: " + e.err.Error()
}

func (e *notResumed) Unwrap() error { return e.err }

func (e *notResumed) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}
