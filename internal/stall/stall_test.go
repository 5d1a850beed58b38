package stall

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestResponseBodyStall: a response whose body stops coming fails the
// Read within the limit with a timeout naming the key; one that keeps
// coming, however slowly, is read whole.
func TestResponseBodyStall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "8")
		w.Write([]byte("abcd"))
		w.(http.Flusher).Flush()
		if r.URL.Path == "/slow" {
			for _, b := range []byte("efgh") {
				time.Sleep(100 * time.Millisecond)
				w.Write([]byte{b})
				w.(http.Flusher).Flush()
			}
			return
		}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	c := &http.Client{Transport: Transport(http.DefaultTransport, 300*time.Millisecond, "first_byte_timeout")}

	resp, err := c.Get(srv.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "abcdefgh" {
		t.Fatalf("slow body: %q, %v; want all 8 bytes", b, err)
	}

	resp, err = c.Get(srv.URL + "/stuck")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	var se *Error
	var ne net.Error
	if !errors.As(err, &se) || !errors.As(err, &ne) || !ne.Timeout() || string(b) != "abcd" {
		t.Fatalf("stuck body: %q, %v; want the first 4 bytes, then a stall timeout", b, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the stall took %v to be noticed, limit 300ms", took)
	}
	if !strings.Contains(err.Error(), "response body stalled") || !strings.Contains(err.Error(), "first_byte_timeout 300ms") {
		t.Errorf("error %q does not say what stalled and which limit", err)
	}
}

// TestRequestBodyStall: a peer that stops reading a request body makes
// the write fail within the limit with a timeout.
func TestRequestBodyStall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(5 * time.Second) // takes nothing
		}
	}()
	d := &net.Dialer{}
	tr := &http.Transport{DialContext: Dial(d.DialContext, 300*time.Millisecond, "first_byte_timeout")}
	defer tr.CloseIdleConnections()
	body := strings.Repeat("x", 64<<20) // more than any socket buffers hold
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, "http://"+ln.Addr().String()+"/k", strings.NewReader(body))
	start := time.Now()
	_, err = tr.RoundTrip(req)
	var se *Error
	if !errors.As(err, &se) || se.What != "request body" {
		t.Fatalf("RoundTrip: %v; want a request body stall", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the stall took %v to be noticed, limit 300ms", took)
	}
}
