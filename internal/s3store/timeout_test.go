package s3store_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// deadStore is a store on addr (nothing answers there) with the given
// timeouts, behind the retry layer with 3 attempts and short backoffs.
func deadStore(t *testing.T, addr string, o s3store.Options) (store.Store, *store.Counter) {
	t.Helper()
	counter := &store.Counter{}
	o.Bucket, o.Endpoint, o.PathStyle, o.Region = "bucket", "http://"+addr, true, "us-east-1"
	o.AccessKeyID, o.SecretAccessKey, o.Counter = "x", "y", counter
	st, err := s3store.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return retry.Wrap(st, retry.Policy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}, counter), counter
}

// wantTimedOut checks that err is the retry layer giving up after 3
// attempts that each hit the named timeout at addr, and that every attempt
// was counted as a request without an answer and retried as a timeout.
func wantTimedOut(t *testing.T, err error, op, addr, limit string, c *store.Counter) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s to a dead endpoint succeeded", op)
	}
	for _, want := range []string{"endpoint " + addr, limit, "gave up after 3 attempts"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s error does not say %q: %v", op, want, err)
		}
	}
	if got := c.Statuses()[store.OpStatus{Op: op, Status: 0}]; got != 3 {
		t.Errorf("%s requests without an answer: %d, want 3 (statuses %v)", op, got, c.Statuses())
	}
	if got := c.Retries()[store.OpReason{Op: op, Reason: "timeout"}]; got != 2 {
		t.Errorf("%s retries for timeout: %d, want 2 (retries %v)", op, got, c.Retries())
	}
}

// TestConnectTimeout: an endpoint that drops packets (a connect that is
// never answered, never refused) fails each attempt at connect_timeout,
// retried, with an error naming the endpoint and the key, instead of
// waiting for the kernel to give up on the SYN (minutes).
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := testenv.BlackHole(t)
	st, c := deadStore(t, addr, s3store.Options{ConnectTimeout: 300 * time.Millisecond})
	start := time.Now()
	err := st.Put(t.Context(), "k", []byte("x"), store.PutOptions{IfNoneMatch: true})
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("3 attempts with connect_timeout 300ms took %v", d)
	}
	wantTimedOut(t, err, "PutObject", addr, "connect_timeout 300ms", c)
	if !strings.Contains(err.Error(), "no TCP connection") {
		t.Errorf("the error does not say the connect timed out: %v", err)
	}
}

// TestFirstByteTimeout: a server that takes the connection and the
// request and never answers fails each attempt at first_byte_timeout, for
// writes and reads, with an error naming the endpoint and the key; every
// attempt dials a connection of its own.
func TestFirstByteTimeout(t *testing.T) {
	t.Parallel()
	stall := testenv.NewStall(t)
	st, c := deadStore(t, stall.Addr, s3store.Options{FirstByteTimeout: 300 * time.Millisecond})
	start := time.Now()
	err := st.Put(t.Context(), "k", []byte("x"), store.PutOptions{})
	wantTimedOut(t, err, "PutObject", stall.Addr, "first_byte_timeout 300ms", c)
	_, err = st.GetRange(t.Context(), "k", 0, 10)
	wantTimedOut(t, err, "GetObject", stall.Addr, "first_byte_timeout 300ms", c)
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("6 attempts with first_byte_timeout 300ms took %v", d)
	}
	if n := stall.Accepted(); n != 6 {
		t.Errorf("the server accepted %d connections for 6 attempts", n)
	}
}

// smallBuffers is a loopback listener whose connections have a 64 KiB
// receive buffer: a reader that falls behind holds the sender up at once,
// not after the kernel has buffered megabytes of the body.
func smallBuffers(t *testing.T) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestBodyStallTimeout: a server that accepts the connection and reads
// nothing fails a large put at first_byte_timeout, while its body is still
// being sent (the response-header timeout only starts once it is sent).
func TestBodyStallTimeout(t *testing.T) {
	t.Parallel()
	ln := smallBuffers(t)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	addr := ln.Addr().String()
	st, c := deadStore(t, addr, s3store.Options{FirstByteTimeout: 500 * time.Millisecond})
	err := st.Put(t.Context(), "k", make([]byte, 32<<20), store.PutOptions{})
	wantTimedOut(t, err, "PutObject", addr, "first_byte_timeout 500ms", c)
	if !strings.Contains(err.Error(), "request body stalled") {
		t.Errorf("the error does not say the body stalled: %v", err)
	}
}

// slowBody hands out the first slow bytes of a request body at about 2.6
// MiB/s, the rest as fast as it is read.
type slowBody struct {
	io.ReadCloser
	slow int64
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.slow <= 0 {
		return b.ReadCloser.Read(p)
	}
	p = p[:min(len(p), 32<<10, int(b.slow))]
	time.Sleep(12 * time.Millisecond)
	n, err := b.ReadCloser.Read(p)
	b.slow -= int64(n)
	return n, err
}

// TestSlowUploadNotCut: a put whose body takes longer to send than
// first_byte_timeout (a large part on a slow link) succeeds, and its
// bytes read back: the timeout counts from the end of the body.
func TestSlowUploadNotCut(t *testing.T) {
	servers(t, func(t *testing.T, e testenv.Endpoint) {
		u, err := url.Parse(e.URL)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = e.Transport(t)
		const size, slow = 16 << 20, 12 << 20
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				r.Body = &slowBody{ReadCloser: r.Body, slow: slow}
			}
			rp.ServeHTTP(w, r)
		}))
		srv.Listener.Close()
		srv.Listener = smallBuffers(t)
		if cfg := e.ServerTLS(t); cfg != nil {
			srv.TLS = cfg
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		o := e.Options(nil)
		o.Endpoint = srv.URL
		// Long enough for the servers to store 16 MiB on a busy machine
		// once it has arrived, short of the time the body takes.
		o.FirstByteTimeout = 2 * time.Second
		st, err := s3store.New(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(rand.N(256))
		}
		start := time.Now()
		if err := st.Put(t.Context(), "slow", body, store.PutOptions{}); err != nil {
			t.Fatalf("a slow upload was cut: %v", err)
		}
		if d := time.Since(start); d < 2*o.FirstByteTimeout {
			t.Fatalf("the upload took %v, not more than twice first_byte_timeout: the test tests nothing", d)
		}
		if got := read(t, st, "slow"); !bytes.Equal(got, body) {
			t.Fatalf("read back %d bytes that differ from the %d put", len(got), len(body))
		}
	})
}

// TestTimeoutDropsIdleConnections: once a request times out on a pooled
// connection, the next attempt dials afresh instead of trying the other
// pooled connections to the same (likely dead) peer one by one; and the
// store serves normally once the peer answers again.
func TestTimeoutDropsIdleConnections(t *testing.T) {
	t.Parallel()
	e := testenv.Embedded(t)
	u, err := url.Parse(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	const pooled = 8
	const (
		serving = iota
		pooling // every request waits until pooled have arrived: one connection each
		stalled // no answer
	)
	var phase atomic.Int32
	release := make(chan struct{})
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch phase.Load() {
		case pooling:
			arrived.Done()
			arrived.Wait()
		case stalled:
			<-release
			return
		}
		rp.ServeHTTP(w, r)
	}))
	var dialled atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() { close(release); srv.Close() })

	o := e.Options(nil)
	o.Endpoint, o.FirstByteTimeout = srv.URL, 500*time.Millisecond
	raw, err := s3store.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Put(t.Context(), "k", []byte("v"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	phase.Store(pooling)
	arrived.Add(pooled)
	var wg sync.WaitGroup
	for range pooled {
		wg.Go(func() {
			if got := read(t, raw, "k"); string(got) != "v" {
				t.Errorf("read %q", got)
			}
		})
	}
	wg.Wait()
	if n := dialled.Load(); n < pooled {
		t.Fatalf("%d GETs at once left %d connections in the pool", pooled, n)
	}

	phase.Store(stalled)
	counter := &store.Counter{}
	st := retry.Wrap(raw, retry.Policy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}, counter)
	before := dialled.Load()
	err = st.Put(t.Context(), "k2", []byte("v"), store.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "first_byte_timeout 500ms") {
		t.Fatalf("put to a stalled server: %v", err)
	}
	if n := dialled.Load() - before; n != 2 {
		t.Errorf("attempts 2 and 3 after a timeout opened %d new connections, want 2 (the idle ones to the stalled peer dropped)", n)
	}

	phase.Store(serving)
	if err := st.Put(t.Context(), "k3", []byte("back"), store.PutOptions{}); err != nil {
		t.Fatalf("put once the server answers again: %v", err)
	}
	if got := read(t, st, "k3"); string(got) != "back" {
		t.Fatalf("read back %q", got)
	}
}

func read(t *testing.T, st store.Reader, key string) []byte {
	t.Helper()
	rc, err := st.GetRange(t.Context(), key, 0, -1)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Error(err)
	}
	return b
}
