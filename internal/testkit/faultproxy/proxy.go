package faultproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// closeWait bounds how long Close waits for handlers still running.
const closeWait = 10 * time.Second

// Proxy is a running fault proxy on a loopback port. Safe for concurrent
// use.
type Proxy struct {
	target *url.URL
	scheme string // of the proxy's own endpoint
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	done   chan struct{} // closed by Close: stalls and spikes end at once

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup
	spec     Spec
	rng      *rand.Rand
	tokens   float64
	refilled time.Time
	stall    Stall // armed stall; Nth counts down to the chosen request
	seq      uint64
	requests map[string]int64
	injected map[Injection]int64
	firstHit map[string]bool // operations Spec.First has landed on
}

// Start listens on a free loopback port and proxies every request to
// target (an http:// URL such as MinIO's endpoint) under spec. Clients
// must address buckets path-style, and their signatures stay valid: the
// proxy forwards the Host header, path and query exactly as received.
func Start(target string, spec Spec) (*Proxy, error) {
	return StartTLS(target, spec, nil, nil)
}

// StartTLS is Start with TLS on either side: serverTLS (with its
// certificate) makes the proxy listen for HTTPS, as an https S3 endpoint
// would, and upstream is the client side's configuration for an https
// target (its RootCAs). Either may be nil: plain HTTP in front, the
// system's roots behind.
func StartTLS(target string, spec Spec, serverTLS, upstream *tls.Config) (*Proxy, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("faultproxy: target %q is not an http(s) URL", target)
	}
	if spec.Spike > 0 && spec.SpikeDelay == 0 {
		spec.SpikeDelay = DefaultSpikeDelay
	}
	spec.Ops = slices.Clone(spec.Ops)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	scheme := "http"
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS.Clone())
		scheme = "https"
	}
	p := &Proxy{
		scheme: scheme,
		target: u,
		ln:     ln,
		done:   make(chan struct{}),
		tr: &http.Transport{
			Proxy:               nil, // never an HTTP(S)_PROXY from the environment
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			// The client's Accept-Encoding (or its absence) goes to the
			// server unchanged, and bodies come back byte for byte.
			DisableCompression: true,
			TLSClientConfig:    upstream,
		},
		spec:     spec,
		rng:      rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9E3779B97F4A7C15)),
		tokens:   float64(burst(spec)),
		refilled: time.Now(),
		stall:    spec.Stall,
		requests: map[string]int64{},
		injected: map[Injection]int64{},
		firstHit: map[string]bool{},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: discardLog()}
	go p.srv.Serve(ln)
	return p, nil
}

func burst(s Spec) int {
	if s.Burst > 0 {
		return s.Burst
	}
	return 1 + int(s.RateLimit/10)
}

// URL is the proxy's endpoint, e.g. http://127.0.0.1:40123 (https:// from
// StartTLS with a server configuration), for the client's endpoint
// setting.
func (p *Proxy) URL() string { return p.scheme + "://" + p.ln.Addr().String() }

// Close stops the proxy: it stops listening, closes client connections,
// ends stalls and spikes, and waits (up to 10 s) for handlers to return.
// Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.srv.Close()
	waited := make(chan struct{})
	go func() { p.handlers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(closeWait):
		err = errors.Join(err, fmt.Errorf("faultproxy: handlers still running %v after close", closeWait))
	}
	p.tr.CloseIdleConnections()
	return err
}

// Stats returns the requests seen and the faults injected so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Requests: maps.Clone(p.requests), Injected: maps.Clone(p.injected)}
}

// SetSpec replaces the fault rates, rate limit and stall of a running
// proxy (the random source keeps its state; a zero Seed keeps the seed);
// Spec.First starts over: each operation's next request meets it.
// Tests use it to turn throttling off and watch the client recover.
func (p *Proxy) SetSpec(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Spike > 0 && s.SpikeDelay == 0 {
		s.SpikeDelay = DefaultSpikeDelay
	}
	s.Ops = slices.Clone(s.Ops)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refill(time.Now())
	if p.spec.RateLimit == 0 {
		p.tokens = float64(burst(s)) // a new limit starts with a full bucket
	}
	p.spec = s
	p.tokens = min(p.tokens, float64(burst(s)))
	p.stall = s.Stall
	clear(p.firstHit)
	return nil
}

// StallNth arms a stall: the nth request of op from now on (1-based) is
// held for d, or until its client gives up or the proxy closes. It
// replaces any armed stall.
func (p *Proxy) StallNth(op string, nth int, d time.Duration) {
	p.Stall(Stall{Op: op, Nth: nth, Delay: d})
}

// Stall arms s, counting from now on; it replaces any armed stall.
func (p *Proxy) Stall(s Stall) {
	p.mu.Lock()
	p.stall = s
	p.mu.Unlock()
}

// decision is what the proxy does with one request.
type decision struct {
	id        string
	op        string
	fault     Fault         // "" : forward untouched (after delay)
	delay     time.Duration // spike or stall, before anything else
	body      StallBody     // a stall in a body instead: its delay is bodyDelay
	bodyDelay time.Duration
	frac      float64 // reset: share of the body read; truncate: share of the body sent
}

// decide draws the request's fate. Every request consumes the same three
// draws, so a seed fixes the sequence of decisions.
func (p *Proxy) decide(op string, part int) (decision, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return decision{}, false
	}
	p.handlers.Add(1)
	p.seq++
	d := decision{id: fmt.Sprintf("faultproxy-%d", p.seq), op: op}
	p.requests[op]++
	u, spike, frac := p.rng.Float64(), p.rng.Float64(), p.rng.Float64()
	d.frac = frac
	s := p.spec
	if len(s.Ops) > 0 && !slices.Contains(s.Ops, op) {
		u, spike = 1, 1 // drawn all the same, so the sequence stays the seed's
	}
	switch {
	case u < s.SlowDown:
		d.fault = FaultSlowDown
	case u < s.SlowDown+s.Internal:
		d.fault = FaultInternal
	case u < s.SlowDown+s.Internal+s.Reset:
		d.fault = FaultReset
	case u < s.SlowDown+s.Internal+s.Reset+s.Truncate:
		d.fault = FaultTruncate // counted when a body is actually cut
	}
	if s.First != "" && !p.firstHit[op] && (len(s.Ops) == 0 || slices.Contains(s.Ops, op)) {
		d.fault = s.First
		// A truncate lands (and is marked) when a body is cut.
		p.firstHit[op] = s.First != FaultTruncate
	}
	if s.RateLimit > 0 && d.fault != FaultSlowDown {
		now := time.Now()
		p.refill(now)
		if p.tokens >= 1 {
			p.tokens--
		} else {
			d.fault = FaultThrottle
		}
	}
	if d.fault != "" && d.fault != FaultTruncate {
		p.injected[Injection{op, d.fault}]++
	}
	if spike < s.Spike && s.SpikeDelay > 0 {
		d.delay = s.SpikeDelay
		p.injected[Injection{op, FaultSpike}]++
	}
	if p.stall.Nth > 0 && p.stall.Op == op && (p.stall.Part <= 0 || p.stall.Part == part) {
		if p.stall.Nth--; p.stall.Nth == 0 && p.stall.Body != "" {
			d.body, d.bodyDelay = p.stall.Body, p.stall.Delay
			p.injected[Injection{op, FaultStall}]++
		} else if p.stall.Nth == 0 {
			d.delay = max(d.delay, p.stall.Delay)
			p.injected[Injection{op, FaultStall}]++
		}
	}
	return d, true
}

// refill adds the tokens earned since the last refill. p.mu is held.
func (p *Proxy) refill(now time.Time) {
	if p.spec.RateLimit > 0 {
		p.tokens = min(float64(burst(p.spec)), p.tokens+now.Sub(p.refilled).Seconds()*p.spec.RateLimit)
	}
	p.refilled = now
}

func (p *Proxy) count(op string, f Fault) {
	p.mu.Lock()
	p.injected[Injection{op, f}]++
	if f == p.spec.First {
		p.firstHit[op] = true
	}
	p.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	part, _ := strconv.Atoi(r.URL.Query().Get("partNumber"))
	d, ok := p.decide(Operation(r), part)
	if !ok {
		http.Error(w, "faultproxy: closed", http.StatusServiceUnavailable)
		return
	}
	defer p.handlers.Done()
	if d.delay > 0 && !p.sleep(r.Context(), d.delay) {
		// The client gave up, or the proxy is closing: drop the
		// connection rather than let the server answer 200 for us.
		panic(http.ErrAbortHandler)
	}
	if d.body == StallRequestBody {
		// Nothing of the body is read: the client's writes block once the
		// sockets' buffers are full.
		p.sleep(r.Context(), d.bodyDelay)
		panic(http.ErrAbortHandler)
	}
	switch d.fault {
	case FaultSlowDown, FaultThrottle, FaultInternal:
		drain(r)
		writeError(w, r, d.fault, d.id)
	case FaultReset:
		reset(w, r, d.frac)
	default: // forwarded, and cut short if d.fault is FaultTruncate
		p.forward(w, r, d)
	}
}

// sleep waits d; false if the request's client went away or the proxy
// closed first.
func (p *Proxy) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-p.done:
		return false
	}
}

// drain reads the request body, so that an error answer reaches a client
// that is still sending instead of breaking its pipe.
func drain(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
}

// writeError answers a refused request in the words of the service it
// speaks: S3's XML error document (503 SlowDown, 500 InternalError),
// Azure's (503 ServerBusy, 500 OperationTimedOut, with x-ms-error-code)
// or the JSON API's error object (429 rateLimitExceeded, 503
// backendError).
func writeError(w http.ResponseWriter, r *http.Request, f Fault, id string) {
	busy := f != FaultInternal
	h := w.Header()
	var status int
	var b strings.Builder
	switch ServiceOf(r) {
	case ServiceAzure:
		code, msg := "OperationTimedOut", "Operation could not be completed within the specified time."
		status = http.StatusInternalServerError
		if busy {
			code, msg, status = "ServerBusy", "The server is busy.", http.StatusServiceUnavailable
		}
		h.Set("Content-Type", "application/xml")
		h.Set("X-Ms-Request-Id", id)
		h.Set("X-Ms-Error-Code", code)
		b.WriteString(`<?xml version="1.0" encoding="utf-8"?>`)
		b.WriteString("<Error><Code>" + code + "</Code><Message>" + msg + "\nRequestId:" + id + "\nTime:" +
			time.Now().UTC().Format("2006-01-02T15:04:05.0000000Z") + "</Message></Error>")
	case ServiceGCS:
		reason, domain, msg := "backendError", "global", "Backend Error"
		status = http.StatusServiceUnavailable
		if busy {
			reason, domain, msg, status = "rateLimitExceeded", "usageLimits", "The rate of requests exceeds the rate limit. Please reduce your request rate.", http.StatusTooManyRequests
		}
		h.Set("Content-Type", "application/json; charset=UTF-8")
		h.Set("X-Guploader-Uploadid", id)
		fmt.Fprintf(&b, `{"error":{"code":%d,"message":%q,"errors":[{"message":%q,"domain":%q,"reason":%q}]}}`, status, msg, msg, domain, reason)
	default:
		code, msg := "InternalError", "We encountered an internal error. Please try again."
		status = http.StatusInternalServerError
		if busy {
			code, msg, status = "SlowDown", "Please reduce your request rate.", http.StatusServiceUnavailable
		}
		h.Set("Content-Type", "application/xml")
		h.Set("X-Amz-Request-Id", id)
		b.WriteString(xml.Header)
		b.WriteString("<Error><Code>" + code + "</Code><Message>" + msg + "</Message><Resource>")
		_ = xml.EscapeText(&b, []byte(r.URL.Path))
		b.WriteString("</Resource><RequestId>" + id + "</RequestId></Error>")
	}
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, b.String())
	}
}

// reset reads frac of the request body, then closes the connection with
// SO_LINGER 0 so the client gets a TCP RST in the middle of sending.
func reset(w http.ResponseWriter, r *http.Request, frac float64) {
	if n := r.ContentLength; n > 0 {
		_, _ = io.CopyN(io.Discard, r.Body, int64(frac*float64(n)))
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection, if not with an RST
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// hopHeaders are meaningful for one connection only and not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k][:0:0], vs...)
	}
	for _, f := range strings.Split(src.Get("Connection"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			dst.Del(f)
		}
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
}

// forward sends r to the target and relays the answer, cutting its body
// short when d says truncate.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, d decision) {
	u := *p.target
	// RequestURI is the path and query exactly as the client sent (and
	// signed) them.
	uri, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		http.Error(w, "faultproxy: bad request URI", http.StatusBadRequest)
		return
	}
	u.Path, u.RawPath, u.RawQuery = uri.Path, uri.RawPath, uri.RawQuery
	body := r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), body)
	if err != nil {
		http.Error(w, "faultproxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	out.ContentLength = r.ContentLength
	out.Host = r.Host // signed by the client: it must reach the server as sent
	copyHeader(out.Header, r.Header)
	if _, ok := r.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // and Go adds none of its own
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // the client is gone; answer nothing
		}
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if d.fault == FaultTruncate && r.Method != http.MethodHead {
		if p.truncate(w, resp, d) {
			return
		}
	}
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if d.body == StallResponseBody && resp.ContentLength > 1 {
		_, _ = io.CopyN(w, resp.Body, resp.ContentLength/2)
		_ = http.NewResponseController(w).Flush()
		p.sleep(r.Context(), d.bodyDelay)
		panic(http.ErrAbortHandler)
	}
	_, _ = io.Copy(w, resp.Body)
}

// truncate relays resp with its full Content-Length but only part of its
// body, then closes the connection. It reports false, having sent
// nothing, when the body is empty and there is nothing to cut.
func (p *Proxy) truncate(w http.ResponseWriter, resp *http.Response, d decision) bool {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(http.ErrAbortHandler) // the upstream broke: so does the answer
	}
	if len(body) == 0 {
		resp.Body = io.NopCloser(strings.NewReader(""))
		return false
	}
	conn, bufrw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	p.count(d.op, FaultTruncate)
	h := http.Header{}
	copyHeader(h, resp.Header)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	cut := int(d.frac * float64(len(body))) // in [0, len): at least one byte is missing
	bw := bufio.NewWriter(conn)
	if bufrw != nil {
		bw = bufrw.Writer
	}
	fmt.Fprintf(bw, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	_ = h.Write(bw)
	_, _ = bw.WriteString("\r\n")
	_, _ = bw.Write(body[:cut])
	_ = bw.Flush()
	return true
}

// discardLog silences the server's log of client connections that broke:
// breaking them is the proxy's job.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
