package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is the shaped link in front of the endpoint: a toxiproxy proxy on
// loopback whose every connection gets half the latency on each direction
// (so a request's round trip costs Latency) and ConnBandwidth bytes per
// second on each direction.
type Link struct {
	Latency       time.Duration
	ConnBandwidth int64  // effective bytes per second per connection and direction
	Addr          string // host:port to dial instead of the endpoint; "" when unshaped
	proxy         *toxiproxy.Proxy
}

// LinkInfo is the link as reported in results.
type LinkInfo struct {
	LatencyMS          float64 `json:"latency_ms"`
	ConnBandwidthBytes int64   `json:"conn_bandwidth_bytes"`
	Connections        int     `json:"connections"`
	LimitBytesPerS     int64   `json:"limit_bytes_per_s"`
	// ProbePutBytesPerS and ProbeGetBytesPerS are what bare PUTs and GETs
	// of part-sized bodies, Connections at once, got through the link
	// just before the scenario: the ceiling on this machine, where the
	// link, the endpoint and the client share the CPUs.
	ProbePutBytesPerS float64 `json:"probe_put_bytes_per_s,omitempty"`
	ProbeGetBytesPerS float64 `json:"probe_get_bytes_per_s,omitempty"`
}

// Info describes the link used with conns connections.
func (l *Link) Info(conns int) LinkInfo {
	if l == nil {
		return LinkInfo{}
	}
	return LinkInfo{
		LatencyMS:          float64(l.Latency) / float64(time.Millisecond),
		ConnBandwidthBytes: l.ConnBandwidth,
		Connections:        conns,
		LimitBytesPerS:     l.Limit(conns),
	}
}

// Limit is what conns connections can carry: no client can beat it.
func (l *Link) Limit(conns int) int64 {
	if l == nil || l.ConnBandwidth <= 0 {
		return 0
	}
	return int64(conns) * l.ConnBandwidth
}

func init() {
	// toxiproxy logs every accepted connection through zerolog's global
	// logger; a benchmark opens hundreds.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
}

// StartLink puts a shaped proxy in front of endpoint (an http or https
// URL). With zero latency and bandwidth it returns an unshaped link that
// dials the endpoint directly.
func StartLink(endpoint string, latency time.Duration, connBandwidth int64) (*Link, error) {
	if latency <= 0 && connBandwidth <= 0 {
		return &Link{}, nil
	}
	upstream, err := hostPort(endpoint)
	if err != nil {
		return nil, err
	}
	logger := zerolog.Nop()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	p := toxiproxy.NewProxy(srv, "durashuffle-bench", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start link proxy to %s: %w", upstream, err)
	}
	l := &Link{Latency: latency, Addr: p.Listen, proxy: p}
	// toxiproxy's bandwidth toxic counts in KB/s (1000 bytes).
	rateKB := (connBandwidth + 500) / 1000
	if connBandwidth > 0 && rateKB < 1 {
		rateKB = 1
	}
	l.ConnBandwidth = rateKB * 1000
	// Bandwidth before latency on each direction. The other way round,
	// every chunk waits in the latency toxic for a timer of its own before
	// the bandwidth toxic may take it, and that wait is not credited to the
	// rate: with 8 connections the link carried 0.917 of its nominal
	// bandwidth (16 MiB each) and 0.955 (48 MiB each), against 0.997 in
	// this order, with the same 20 ms round trip.
	for _, dir := range []string{"upstream", "downstream"} {
		if rateKB > 0 {
			if err := addToxic(p, fmt.Sprintf(`{"name":"bandwidth_%s","type":"bandwidth","stream":%q,"attributes":{"rate":%d}}`, dir, dir, rateKB)); err != nil {
				p.Stop()
				return nil, err
			}
		}
		if latency > 0 {
			half := latency.Milliseconds() / 2
			if err := addToxic(p, fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, dir, dir, half)); err != nil {
				p.Stop()
				return nil, err
			}
		}
	}
	return l, nil
}

func addToxic(p *toxiproxy.Proxy, js string) error {
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("add toxic %s: %w", js, err)
	}
	return nil
}

// Close stops the proxy and cuts its connections.
func (l *Link) Close() {
	if l != nil && l.proxy != nil {
		l.proxy.Stop()
	}
}

func hostPort(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("endpoint %q: want a URL such as http://127.0.0.1:9000", endpoint)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return net.JoinHostPort(u.Hostname(), "80"), nil
}

// HTTPClient is the client every contender uses: at most conns
// connections (the link's), all dialled to dial (the proxy) when it is
// set, whatever host the URL names, so TLS and Host headers still name
// the real endpoint.
// tlsCfg (may be nil) is the client's TLS configuration for an https
// endpoint.
func HTTPClient(dial string, conns int, tlsCfg *tls.Config) (*http.Client, *http.Transport) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       tlsCfg,
		// Large socket buffers on both ends would let a client "finish"
		// writing a part long before the link carried it.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dial != "" {
			addr = dial
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr}, tr
}
