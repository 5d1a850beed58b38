package gcsstore

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// newTransport pools enough connections that concurrent parts and ranged
// GETs reuse them, and bounds connecting and waiting for a response's
// headers (counted from the end of the request body, so a large part on
// a slow link has all the time it needs to be sent).
func newTransport(o Options) *http.Transport {
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
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   connect,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		ResponseHeaderTimeout: firstByte,
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		MaxConnsPerHost:       maxConns,
		IdleConnTimeout:       90 * time.Second,
	}
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
		t.counter.Request(method(req), status)
	}
	return resp, err
}

// method names a JSON API request by the method it calls: the resource
// path after /storage/v1/ (object names are escaped, so they hold no
// slash) and the HTTP verb.
func method(req *http.Request) string {
	path := req.URL.EscapedPath()
	i := strings.Index(path, "/storage/v1/")
	if i < 0 {
		return "other"
	}
	upload := strings.HasSuffix(path[:i], "/upload")
	segs := strings.Split(strings.Trim(path[i+len("/storage/v1/"):], "/"), "/")
	if len(segs) == 0 || segs[0] != "b" {
		return "other"
	}
	switch len(segs) {
	case 1:
		return verb("buckets", req.Method, "list", "insert")
	case 2:
		return verb("buckets", req.Method, "get", "")
	case 3:
		if upload {
			return "objects.insert"
		}
		return verb("objects", req.Method, "list", "insert")
	case 4:
		return verb("objects", req.Method, "get", "")
	case 5:
		if segs[4] == "compose" {
			return "objects.compose"
		}
		return "objects." + segs[4]
	}
	return "other"
}

// verb is resource.get (or the collection's list) for GET, post for
// POST, delete, patch or update by HTTP verb.
func verb(resource, httpMethod, get, post string) string {
	switch httpMethod {
	case http.MethodGet, http.MethodHead:
		return resource + "." + get
	case http.MethodPost:
		if post != "" {
			return resource + "." + post
		}
	case http.MethodDelete:
		return resource + ".delete"
	case http.MethodPatch:
		return resource + ".patch"
	case http.MethodPut:
		return resource + ".update"
	}
	return resource + "." + strings.ToLower(httpMethod)
}
