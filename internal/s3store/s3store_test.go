package s3store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// servers runs f against the embedded server, MinIO and versitygw.
func servers(t *testing.T, f func(t *testing.T, e testenv.Endpoint)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { f(t, b.Start(t)) })
	}
}

// recorded is what a recording proxy saw of one request.
type recorded struct {
	method, query string
	header        http.Header
}

// recordingProxy forwards to target and keeps every request's headers, to
// check what the SDK really puts on the wire.
func recordingProxy(t *testing.T, e testenv.Endpoint) (string, func() []recorded) {
	u, err := url.Parse(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []recorded
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = e.Transport(t)
	srv := e.NewProxyServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, recorded{r.Method, r.URL.RawQuery, r.Header.Clone()})
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	return srv.URL, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), seen...)
	}
}

// TestWire checks the headers durashuffle depends on, through a proxy, on
// both servers: checksums as plain headers (never aws-chunked), the
// checksum algorithm on create, If-None-Match, and Range.
func TestWire(t *testing.T) {
	servers(t, func(t *testing.T, e testenv.Endpoint) {
		proxyURL, seen := recordingProxy(t, e)
		e.URL = proxyURL
		s, c := e.NewStore(t)
		ctx := ctx(t)

		body := bytes.Repeat([]byte("durashuffle"), 300_000) // over the SDK's 2 MiB 100-continue threshold
		sum := store.CRC32C(body)
		if err := s.Put(ctx, "w/manifest.json", body, store.PutOptions{IfNoneMatch: true, CRC32C: &sum}); err != nil {
			t.Fatal(err)
		}
		id, err := s.CreateMultipart(ctx, "w/data")
		if err != nil {
			t.Fatal(err)
		}
		pt, err := s.UploadPart(ctx, "w/data", id, 1, store.BytesBody(body).WithCRC32C(sum))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteMultipart(ctx, "w/data", id, []store.Part{pt}); err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{10, 10}, {10, -1}, {0, -1}} {
			rc, err := s.GetRange(ctx, "w/data", r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			want := body[r[0]:]
			if r[1] >= 0 {
				want = want[:r[1]]
			}
			if !bytes.Equal(got, want) {
				t.Errorf("GetRange(%d, %d) read %d bytes, want %d", r[0], r[1], len(got), len(want))
			}
		}

		wantCRC := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, sum))
		var ranges []string
		for _, r := range seen() {
			h := r.header
			if strings.Contains(h.Get("Content-Encoding"), "aws-chunked") || strings.HasPrefix(h.Get("X-Amz-Content-Sha256"), "STREAMING-") {
				t.Errorf("%s ?%s sent an aws-chunked body (%s)", r.method, r.query, h.Get("X-Amz-Content-Sha256"))
			}
			if e := h.Get("Expect"); e != "" {
				t.Errorf("%s ?%s sent Expect: %s, a round trip per part", r.method, r.query, e)
			}
			switch {
			case r.method == "PUT" && strings.Contains(r.query, "uploadId"):
				if got := h.Get("X-Amz-Checksum-Crc32c"); got != wantCRC {
					t.Errorf("UploadPart x-amz-checksum-crc32c = %q, want %q", got, wantCRC)
				}
			case r.method == "PUT":
				if got := h.Get("X-Amz-Checksum-Crc32c"); got != wantCRC {
					t.Errorf("PutObject x-amz-checksum-crc32c = %q, want %q", got, wantCRC)
				}
				if got := h.Get("If-None-Match"); got != "*" {
					t.Errorf("PutObject If-None-Match = %q, want *", got)
				}
			case r.method == "POST" && strings.HasPrefix(r.query, "uploads"):
				if got := h.Get("X-Amz-Checksum-Algorithm"); got != "CRC32C" {
					t.Errorf("CreateMultipartUpload x-amz-checksum-algorithm = %q, want CRC32C", got)
				}
			case r.method == "GET":
				ranges = append(ranges, h.Get("Range"))
			}
		}
		if want := []string{"bytes=10-19", "bytes=10-", ""}; !slices.Equal(ranges, want) {
			t.Errorf("Range headers = %q, want %q", ranges, want)
		}
		want := map[string]int64{"PutObject": 1, "CreateMultipartUpload": 1, "UploadPart": 1,
			"CompleteMultipartUpload": 1, "GetObject": 3}
		if got := c.Requests(); !maps.Equal(got, want) {
			t.Errorf("request counts = %v, want %v", got, want)
		}
	})
}

// TestCounter checks names and statuses of counted requests, failures
// included.
func TestCounter(t *testing.T) {
	servers(t, func(t *testing.T, e testenv.Endpoint) {
		s, c := e.NewStore(t)
		ctx := ctx(t)
		if err := s.Put(ctx, "c/a", []byte("x"), store.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "c/a", []byte("y"), store.PutOptions{IfNoneMatch: true}); !errors.Is(err, store.ErrPreconditionFailed) {
			t.Fatalf("second conditional put: %v", err)
		}
		if _, err := s.GetRange(ctx, "c/missing", 0, -1); !store.IsNotFound(err) {
			t.Fatalf("get missing: %v", err)
		}
		if _, _, err := s.List(ctx, "c/", "/"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ListUploads(ctx, "c/"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "c/a", "c/missing"); err != nil {
			t.Fatal(err)
		}
		want := map[store.OpStatus]int64{
			{Op: "PutObject", Status: 200}:            1,
			{Op: "PutObject", Status: 412}:            1,
			{Op: "GetObject", Status: 404}:            1,
			{Op: "ListObjectsV2", Status: 200}:        1,
			{Op: "ListMultipartUploads", Status: 200}: 1,
			{Op: "DeleteObjects", Status: 200}:        1,
		}
		if got := c.Statuses(); !maps.Equal(got, want) {
			t.Errorf("statuses = %v, want %v", got, want)
		}
	})
}

func TestErrorsFromServers(t *testing.T) {
	for _, be := range testenv.Backends() {
		t.Run(be.Name, func(t *testing.T) { errorsFromServer(t, be.Name, be.Start(t)) })
	}
}

func errorsFromServer(t *testing.T, b string, e testenv.Endpoint) {
	s, _ := e.NewStore(t)
	ctx := ctx(t)
	body := []byte("some bytes")
	wrong := store.CRC32C(body) + 1
	err := s.Put(ctx, "e/bad", body, store.PutOptions{CRC32C: &wrong})
	var se *store.Error
	if !errors.As(err, &se) || se.Status != 400 || se.Retryable || se.Op != "PutObject" || se.Key != "e/bad" {
		t.Errorf("put with wrong CRC32C: %#v", err)
	} else {
		t.Logf("wrong CRC32C: HTTP %d %s", se.Status, se.Code)
	}
	_, err = s.GetRange(ctx, "e/missing", 0, 10)
	if !errors.As(err, &se) || se.Status != 404 || se.Code != "NoSuchKey" || se.Op != "GetObject" {
		t.Errorf("missing key: %#v", err)
	}
	if err := s.AbortMultipart(ctx, "e/x", "no-such-upload-id"); err != nil && !store.IsNotFound(err) {
		t.Errorf("abort of an unknown upload: %v", err)
	}
	// S3, MinIO and the embedded server say the upload is gone;
	// versitygw checks the parts first and rejects them. Either way
	// the same request will not succeed, and a fresh upload may.
	err = s.CompleteMultipart(ctx, "e/x", "no-such-upload-id", []store.Part{{Number: 1, ETag: `"x"`}})
	switch {
	case b == "versitygw":
		if !errors.As(err, &se) || se.Status != 400 || se.Code != "InvalidPart" || se.Retryable || !errors.Is(err, store.ErrPartRejected) {
			t.Errorf("complete of an unknown upload on versitygw: %v, want a permanent 400 InvalidPart (store.ErrPartRejected)", err)
		}
	case !store.IsNotFound(err) || store.IsTransient(err):
		t.Errorf("complete of an unknown upload: %v, want a permanent not found", err)
	}

	// A part the server does not have (here: a wrong ETag) is 400
	// InvalidPart everywhere, classed as ErrPartRejected.
	key := "e/wrong-etag"
	id, err := s.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	part := bytes.Repeat([]byte("p"), 5<<20)
	sum := store.CRC32C(part)
	if _, err := s.UploadPart(ctx, key, id, 1, store.BytesBody(part).WithCRC32C(sum)); err != nil {
		t.Fatal(err)
	}
	err = s.CompleteMultipart(ctx, key, id, []store.Part{{Number: 1, ETag: `"0123456789abcdef0123456789abcdef"`, CRC32C: &sum, Size: int64(len(part))}})
	if !errors.As(err, &se) || se.Status != 400 || se.Code != "InvalidPart" || se.Retryable || !errors.Is(err, store.ErrPartRejected) {
		t.Errorf("complete with a wrong ETag: %v, want a permanent 400 InvalidPart (store.ErrPartRejected)", err)
	}
	if err := s.AbortMultipart(ctx, key, id); err != nil {
		t.Errorf("abort after the rejected complete: %v", err)
	}
}

func TestEnsureBucket(t *testing.T) {
	servers(t, func(t *testing.T, e testenv.Endpoint) {
		e.Bucket += "-new"
		s, err := s3store.New(context.Background(), e.Options(nil))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := s.EnsureBucket(ctx(t)); err != nil {
				t.Fatalf("EnsureBucket #%d: %v", i+1, err)
			}
		}
		if err := s.Put(ctx(t), "k", []byte("v"), store.PutOptions{}); err != nil {
			t.Fatalf("put into the new bucket: %v", err)
		}
		if s.Bucket() != e.Bucket {
			t.Errorf("Bucket() = %q, want %q", s.Bucket(), e.Bucket)
		}
	})
}

func TestCanceledIsNotRetryable(t *testing.T) {
	e := testenv.Embedded(t)
	s, _ := e.NewStore(t)
	c, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Put(c, "k", []byte("v"), store.PutOptions{})
	if !errors.Is(err, context.Canceled) || store.IsTransient(err) {
		t.Errorf("put with a canceled context: %v (retryable %v)", err, store.IsTransient(err))
	}
	var se *store.Error
	if !errors.As(err, &se) || se.Retryable {
		t.Errorf("not a non-retryable *store.Error: %#v", err)
	}
}

// fake serves a canned response to every request, counting them.
func fake(t *testing.T, h http.HandlerFunc) (*s3store.Store, *store.Counter, *int) {
	var mu sync.Mutex
	n := new(int)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*n++
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	c := new(store.Counter)
	s, err := s3store.New(context.Background(), s3store.Options{
		Bucket: "b", Endpoint: srv.URL, PathStyle: true, Counter: c,
		AccessKeyID: "k", SecretAccessKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, n
}

func xmlError(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+code+`</Code><Message>m</Message></Error>`)
	}
}

// TestNoSDKRetries: a 503 reaches the caller after exactly one request,
// even with AWS_MAX_ATTEMPTS asking for more, so the one retry layer above
// the store is the only one.
func TestNoSDKRetries(t *testing.T) {
	t.Setenv("AWS_MAX_ATTEMPTS", "5")
	t.Setenv("AWS_RETRY_MODE", "standard")
	s, c, n := fake(t, xmlError(503, "SlowDown"))
	err := s.Put(ctx(t), "k", []byte("v"), store.PutOptions{})
	var se *store.Error
	if !errors.As(err, &se) || se.Status != 503 || se.Code != "SlowDown" || !store.IsTransient(err) {
		t.Fatalf("got %#v, want a retryable 503 SlowDown", err)
	}
	if *n != 1 {
		t.Errorf("server saw %d requests, want 1", *n)
	}
	if got, want := c.Statuses(), map[store.OpStatus]int64{{Op: "PutObject", Status: 503}: 1}; !maps.Equal(got, want) {
		t.Errorf("counter = %v, want %v", got, want)
	}
}

// TestNoResponseCountsStatusZero: a connection dropped before any response
// is counted with status 0 and is retryable.
func TestNoResponseCountsStatusZero(t *testing.T) {
	s, c, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	_, err := s.GetRange(ctx(t), "k", 0, 10)
	var se *store.Error
	if !errors.As(err, &se) || se.Status != 0 || !se.Retryable {
		t.Fatalf("got %#v, want a retryable error without status", err)
	}
	if got, want := c.Statuses(), map[store.OpStatus]int64{{Op: "GetObject", Status: 0}: 1}; !maps.Equal(got, want) {
		t.Errorf("counter = %v, want %v", got, want)
	}
}

// TestTruncatedBody: a GET body cut short surfaces from Read as a
// retryable *store.Error, so the reader can fetch the rest.
func TestTruncatedBody(t *testing.T) {
	s, _, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Header().Set("Content-Range", "bytes 0-99/1000")
		w.WriteHeader(http.StatusPartialContent)
		w.Write(make([]byte, 50))
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	})
	rc, err := s.GetRange(ctx(t), "k", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	var se *store.Error
	if !errors.As(err, &se) || !se.Retryable || se.Op != "GetObject" || se.Key != "k" {
		t.Fatalf("read %d bytes then %#v, want a retryable GetObject error", len(b), err)
	}
	if len(b) != 50 {
		t.Errorf("read %d bytes before the cut, want 50", len(b))
	}
}

// TestIgnoredRange: a server that answers a ranged GET with the whole
// object must not have its bytes passed off as the range.
func TestIgnoredRange(t *testing.T) {
	s, _, _ := fake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("0123456789"))
	})
	if _, err := s.GetRange(ctx(t), "k", 5, 2); err == nil {
		t.Fatal("ranged GET answered with 200 and no Content-Range was accepted")
	}
	// From offset 0 the whole object starts with the range: keep only
	// what was asked for.
	rc, err := s.GetRange(ctx(t), "k", 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, err := io.ReadAll(rc); err != nil || string(b) != "0123" {
		t.Errorf("GetRange(0, 4) read %q, %v; want 0123", b, err)
	}
}

// TestDeleteReportsKeyErrors: per-key failures in a 200 DeleteObjects
// response are errors naming the key; missing keys are not.
func TestDeleteReportsKeyErrors(t *testing.T) {
	respond := func(errs string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`+errs+`</DeleteResult>`)
		}
	}
	keyErr := func(key, code string) string {
		return `<Error><Key>` + key + `</Key><Code>` + code + `</Code><Message>m</Message></Error>`
	}
	for _, c := range []struct {
		name      string
		errs      string
		wantErr   bool
		key       string
		retryable bool
	}{
		{"all deleted", "", false, "", false},
		{"missing key", keyErr("b", "NoSuchKey"), false, "", false},
		{"access denied", keyErr("b", "NoSuchKey") + keyErr("c", "AccessDenied"), true, "c", false},
		{"transient", keyErr("a", "InternalError") + keyErr("c", "SlowDown"), true, "a", true},
		{"mixed", keyErr("a", "InternalError") + keyErr("c", "AccessDenied"), true, "a", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _, _ := fake(t, respond(c.errs))
			err := s.Delete(ctx(t), "a", "b", "c")
			if !c.wantErr {
				if err != nil {
					t.Fatalf("Delete: %v", err)
				}
				return
			}
			var se *store.Error
			if !errors.As(err, &se) || se.Key != c.key || se.Retryable != c.retryable || se.Op != "DeleteObjects" {
				t.Fatalf("Delete: %#v, want key %q retryable %v", err, c.key, c.retryable)
			}
		})
	}
}

// TestDeleteBatches: 2500 keys go out as DeleteObjects of 1000, 1000, 500.
func TestDeleteBatches(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sizes = append(sizes, strings.Count(string(b), "<Object>"))
		mu.Unlock()
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><DeleteResult></DeleteResult>`)
	}))
	t.Cleanup(srv.Close)
	c := new(store.Counter)
	s, err := s3store.New(context.Background(), s3store.Options{
		Bucket: "b", Endpoint: srv.URL, PathStyle: true, Counter: c, AccessKeyID: "k", SecretAccessKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = "k" + string(rune('a'+i%26))
	}
	if err := s.Delete(ctx(t), keys...); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sizes, []int{1000, 1000, 500}) {
		t.Errorf("batch sizes = %v, want [1000 1000 500]", sizes)
	}
	if got := c.Requests()["DeleteObjects"]; got != 3 {
		t.Errorf("counted %d DeleteObjects, want 3", got)
	}
}

func TestNewValidates(t *testing.T) {
	for _, o := range []s3store.Options{{}, {Bucket: "b", MaxConns: -1}} {
		if _, err := s3store.New(context.Background(), o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestUploadPartStream streams a part to every server that speaks TLS
// (MinIO here) from a body that is still being written: the request
// reaches the server before the body's second half exists, goes out
// aws-chunked with the CRC32C in a trailer, the server acknowledges that
// checksum, and the completed object holds the bytes. Over plain HTTP
// the store says it does not stream and refuses to.
func TestUploadPartStream(t *testing.T) {
	servers(t, func(t *testing.T, e testenv.Endpoint) {
		proxyURL, seen := recordingProxy(t, e)
		pe := e
		pe.URL = proxyURL
		s, _ := pe.NewStore(t)
		ctx := ctx(t)
		id, err := s.CreateMultipart(ctx, "stream/data")
		if err != nil {
			t.Fatal(err)
		}
		defer s.AbortMultipart(context.WithoutCancel(ctx), "stream/data", id)
		body := bytes.Repeat([]byte("streamed part "), 400_000) // 5.6 MB: over S3's part minimum
		if !e.TLS() {
			if s.StreamsParts() {
				t.Fatalf("store on %s streams parts", e.URL)
			}
			if _, err := s.UploadPart(ctx, "stream/data", id, 1, store.StreamBody(int64(len(body)), func() io.Reader { return bytes.NewReader(body) })); err == nil {
				t.Fatal("a streamed part over plain HTTP succeeded")
			}
			return
		}
		if !s.StreamsParts() {
			t.Fatalf("store on %s does not stream parts", e.URL)
		}
		pr, pw := io.Pipe()
		half := len(body) / 2
		go func() {
			pw.Write(body[:half])
			// The second half is written only once the request is at
			// the server.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				for _, r := range seen() {
					if r.method == http.MethodPut && strings.Contains(r.query, "partNumber=1") {
						pw.Write(body[half:])
						pw.Close()
						return
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			pw.CloseWithError(errors.New("the request never reached the server"))
		}()
		pt, err := s.UploadPart(ctx, "stream/data", id, 1, store.StreamBody(int64(len(body)), func() io.Reader { return pr }))
		if err != nil {
			t.Fatal(err)
		}
		if want := store.CRC32C(body); pt.CRC32C == nil || *pt.CRC32C != want {
			t.Fatalf("acknowledged CRC32C %v, want %08x", pt.CRC32C, want)
		}
		var part *recorded
		for _, r := range seen() {
			if r.method == http.MethodPut && strings.Contains(r.query, "partNumber=1") {
				part = &r
			}
		}
		if part == nil {
			t.Fatal("no UploadPart seen")
		}
		if ce, tr, dl := part.header.Get("Content-Encoding"), part.header.Get("X-Amz-Trailer"), part.header.Get("X-Amz-Decoded-Content-Length"); !strings.Contains(ce, "aws-chunked") ||
			!strings.EqualFold(tr, "x-amz-checksum-crc32c") || dl != strconv.Itoa(len(body)) {
			t.Fatalf("streamed part sent with Content-Encoding %q, X-Amz-Trailer %q, decoded length %q; want aws-chunked, the CRC32C trailer, %d", ce, tr, dl, len(body))
		}
		if part.header.Get("X-Amz-Checksum-Crc32c") != "" {
			t.Fatal("streamed part carries its checksum as a header")
		}
		if err := s.CompleteMultipart(ctx, "stream/data", id, []store.Part{pt}); err != nil {
			t.Fatal(err)
		}
		rc, err := s.GetRange(ctx, "stream/data", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read back %d bytes (%v), want the %d streamed", len(got), err, len(body))
		}
	})
}
