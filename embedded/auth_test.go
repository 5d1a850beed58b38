package embedded_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
)

// sign signs req as an S3 client does, at time at (zero: now), with
// x-amz-content-sha256 set to payload (empty: the SHA-256 of the body,
// which is read and put back).
func signAt(t *testing.T, p aws.CredentialsProvider, req *http.Request, payload string, at time.Time) *http.Request {
	t.Helper()
	if payload == "" {
		var body []byte
		if req.Body != nil {
			var err error
			if body, err = io.ReadAll(req.Body); err != nil {
				t.Fatal(err)
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds, err := p.Retrieve(req.Context())
	if err != nil {
		t.Fatal(err)
	}
	if at.IsZero() {
		at = time.Now()
	}
	err = v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
		SignHTTP(req.Context(), creds, req, payload, "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func sign(t *testing.T, p aws.CredentialsProvider, req *http.Request, payload string) *http.Request {
	t.Helper()
	return signAt(t, p, req, payload, time.Time{})
}

// send does req and returns the status and the S3 error code, if any.
func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := ""
	if _, rest, ok := strings.Cut(string(b), "<Code>"); ok {
		code, _, _ = strings.Cut(rest, "</Code>")
	}
	return resp.StatusCode, code
}

func newReq(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// nothingThere checks, with the server's own credentials, that key does
// not exist and that no multipart upload is open.
func nothingThere(t *testing.T, s *s3store.Store, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GetRange(ctx, key, 0, -1); !store.IsNotFound(err) {
		t.Errorf("a refused request left %s behind (GetRange: %v)", key, err)
	}
	if ups, err := s.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
		t.Errorf("a refused request left uploads %v (%v)", ups, err)
	}
}

// TestUnsignedRefused: every request without a signature, reads included,
// is refused with 403 AccessDenied, and the PUTs that would plant a
// manifest or start an upload create nothing.
func TestUnsignedRefused(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	s := newStore(t, srv, "bkt")
	if err := s.Put(context.Background(), "existing", []byte("x"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ep := srv.Endpoint()
	manifest := "/bkt/durashuffle/q/stage-0/worker-0/manifest.json"
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPut, manifest, `{"committed":true}`},
		{http.MethodPost, "/bkt/mp?uploads", ""},
		{http.MethodGet, "/bkt/existing", ""},
		{http.MethodHead, "/bkt/existing", ""},
		{http.MethodGet, "/bkt?list-type=2", ""},
		{http.MethodDelete, "/bkt/existing", ""},
		{http.MethodGet, "/", ""},
	} {
		req := newReq(t, c.method, ep+c.path, c.body)
		if c.method == http.MethodPut {
			req.Header.Set("If-None-Match", "*")
		}
		status, code := send(t, req)
		if status != http.StatusForbidden || (c.method != http.MethodHead && code != "AccessDenied") {
			t.Errorf("unsigned %s %s: %d %s, want 403 AccessDenied", c.method, c.path, status, code)
		}
	}
	nothingThere(t, s, strings.TrimPrefix(manifest, "/bkt/"))
	if got := read(t, s, "existing"); string(got) != "x" {
		t.Errorf("an unsigned DELETE changed the object: %q", got)
	}
}

// TestWrongKeysRefused: requests signed with another secret, another key
// ID, or a signature that was valid for another request are refused with
// 403 and create nothing; and the S3 store, given wrong keys, fails with a
// 403 it does not retry.
func TestWrongKeysRefused(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	s := newStore(t, srv, "bkt")
	right, err := srv.Credentials().Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wrongSecret := credentials.NewStaticCredentialsProvider(right.AccessKeyID, "not-the-secret", "")
	wrongID := credentials.NewStaticCredentialsProvider("SOMEONE-ELSE", right.SecretAccessKey, "")
	ep := srv.Endpoint()

	for _, c := range []struct {
		name string
		req  *http.Request
		code string
	}{
		{"wrong secret", sign(t, wrongSecret, newReq(t, http.MethodPut, ep+"/bkt/k1", "planted"), ""), "SignatureDoesNotMatch"},
		{"wrong key ID", sign(t, wrongID, newReq(t, http.MethodPut, ep+"/bkt/k1", "planted"), ""), "InvalidAccessKeyId"},
		{"wrong secret, upload", sign(t, wrongSecret, newReq(t, http.MethodPost, ep+"/bkt/k1?uploads", ""), ""), "SignatureDoesNotMatch"},
		{"signed an hour ago", signAt(t, srv.Credentials(), newReq(t, http.MethodPut, ep+"/bkt/k1", "planted"), "", time.Now().Add(-time.Hour)), "RequestTimeTooSkewed"},
	} {
		if status, code := send(t, c.req); status != http.StatusForbidden || code != c.code {
			t.Errorf("%s: %d %s, want 403 %s", c.name, status, code, c.code)
		}
	}

	// A signature taken from one request and put on another.
	good := sign(t, srv.Credentials(), newReq(t, http.MethodPut, ep+"/bkt/k1", "planted"), "")
	other := newReq(t, http.MethodPut, ep+"/bkt/k2", "planted")
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Content-Sha256"} {
		other.Header.Set(h, good.Header.Get(h))
	}
	if status, code := send(t, other); status != http.StatusForbidden || code != "SignatureDoesNotMatch" {
		t.Errorf("a signature replayed on another key: %d %s, want 403 SignatureDoesNotMatch", status, code)
	}
	// A signed header dropped (the condition of a commit).
	cond := newReq(t, http.MethodPut, ep+"/bkt/k1", "planted")
	cond.Header.Set("If-None-Match", "*")
	sign(t, srv.Credentials(), cond, "")
	cond.Header.Del("If-None-Match")
	if status, code := send(t, cond); status != http.StatusForbidden || code != "SignatureDoesNotMatch" {
		t.Errorf("a signed header dropped: %d %s, want 403 SignatureDoesNotMatch", status, code)
	}
	// A body other than the one whose SHA-256 was signed.
	swapped := sign(t, srv.Credentials(), newReq(t, http.MethodPut, ep+"/bkt/k1", "planted"), "")
	swapped.Body = io.NopCloser(strings.NewReader("swapped"))
	if status, code := send(t, swapped); status != http.StatusBadRequest || code != "BadDigest" {
		t.Errorf("a swapped body: %d %s, want 400 BadDigest", status, code)
	}
	nothingThere(t, s, "k1")
	nothingThere(t, s, "k2")

	bad, err := s3store.New(context.Background(), s3store.Options{Bucket: "bkt", Endpoint: ep, PathStyle: true, Region: "us-east-1", Credentials: wrongSecret})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Put(context.Background(), "k1", []byte("planted"), store.PutOptions{IfNoneMatch: true})
	var se *store.Error
	if !errors.As(err, &se) || se.Status != http.StatusForbidden || se.Code != "SignatureDoesNotMatch" || store.IsTransient(err) {
		t.Errorf("Put with a wrong secret: %v, want a 403 SignatureDoesNotMatch that is not retried", err)
	}
	nothingThere(t, s, "k1")
}

// TestPresigned: presigned URLs made by the SDK with the server's keys
// work for PUT and GET; one with a key changed, or expired, is refused.
func TestPresigned(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	ctx := context.Background()
	ps := s3.NewPresignClient(s3.New(s3.Options{Region: "us-east-1", Credentials: srv.Credentials(),
		BaseEndpoint: aws.String(srv.Endpoint()), UsePathStyle: true}))
	put, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("p")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if status, code := send(t, newReq(t, http.MethodPut, put.URL, "presigned")); status != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", status, code)
	}
	get, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("p")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(get.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "presigned" {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, b)
	}

	moved := strings.Replace(put.URL, "/bkt/p?", "/bkt/q?", 1)
	if status, code := send(t, newReq(t, http.MethodPut, moved, "planted")); status != http.StatusForbidden || code != "SignatureDoesNotMatch" {
		t.Errorf("presigned PUT to another key: %d %s, want 403 SignatureDoesNotMatch", status, code)
	}
	// Signed an hour ago, valid for a minute.
	creds, err := srv.Credentials().Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := newReq(t, http.MethodPut, srv.Endpoint()+"/bkt/q?X-Amz-Expires=60", "planted")
	expired, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).
		PresignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if status, code := send(t, newReq(t, http.MethodPut, expired, "planted")); status != http.StatusForbidden || code != "AccessDenied" {
		t.Errorf("expired presigned PUT: %d %s, want 403 AccessDenied", status, code)
	}
	nothingThere(t, newStore(t, srv, "bkt"), "q")
}

// TestUnsignedPayload: a signed request whose body is declared
// UNSIGNED-PAYLOAD (what S3 clients send over TLS) is taken, and what it
// stored reads back.
func TestUnsignedPayload(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	req := sign(t, srv.Credentials(), newReq(t, http.MethodPut, srv.Endpoint()+"/bkt/u", "unsigned body"), "UNSIGNED-PAYLOAD")
	if status, code := send(t, req); status != http.StatusOK {
		t.Fatalf("UNSIGNED-PAYLOAD put: %d %s", status, code)
	}
	if got := read(t, newStore(t, srv, "bkt"), "u"); string(got) != "unsigned body" {
		t.Fatalf("read back %q", got)
	}
}

// TestStreamedPartSignature: over HTTPS the SDK streams a part as
// aws-chunked with STREAMING-UNSIGNED-PAYLOAD-TRAILER, signing only its
// headers. Through a TLS proxy in front of the server that signature is
// accepted: the part reaches the body check, which refuses trailers with
// 501 NotImplemented (the package doc's limit), not 403.
func TestStreamedPartSignature(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	u, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var payloads []string
	rp := httputil.NewSingleHostReverseProxy(u)
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		payloads = append(payloads, r.Header.Get("X-Amz-Content-Sha256"))
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	st, err := s3store.New(context.Background(), s3store.Options{Bucket: "bkt", Endpoint: proxy.URL, PathStyle: true, Region: "us-east-1",
		Credentials: srv.Credentials(), InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !st.StreamsParts() {
		t.Fatal("an https store does not stream parts")
	}
	id, err := st.CreateMultipart(ctx, "big")
	if err != nil {
		t.Fatalf("CreateMultipart over TLS: %v", err)
	}
	// Small enough for the socket buffers: the server refuses it without
	// reading it, and the proxy must still get the answer through.
	body := bytes.Repeat([]byte("x"), 16<<10)
	_, err = st.UploadPart(ctx, "big", id, 1, store.StreamBody(int64(len(body)), func() io.Reader { return bytes.NewReader(body) }))
	var se *store.Error
	if !errors.As(err, &se) || se.Status != http.StatusNotImplemented {
		t.Fatalf("streamed part: %v, want the body check's 501 (the signature accepted)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(payloads, " "), "STREAMING-UNSIGNED-PAYLOAD-TRAILER") {
		t.Errorf("the SDK sent no streamed part (payloads %q): the test tests nothing", payloads)
	}
	// Not through the proxy: its connection to the server may still be
	// owed the refused body.
	if err := newStore(t, srv, "bkt").AbortMultipart(ctx, "big", id); err != nil {
		t.Errorf("abort: %v", err)
	}
}

// TestLoopbackOnly: an address beyond loopback is refused before anything
// listens; loopback addresses and fixed keys work.
func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9000", "[::]:0", "example.com:9000"} {
		srv, err := embedded.StartWith(embedded.Options{DataDir: t.TempDir(), Addr: addr})
		if err == nil {
			srv.Close()
			t.Errorf("StartWith accepted %s", addr)
			continue
		}
		if !errors.Is(err, embedded.ErrNotLoopback) || !strings.Contains(err.Error(), addr) {
			t.Errorf("StartWith %s: %v, want ErrNotLoopback naming the address", addr, err)
		}
	}
	srv, err := embedded.StartWith(embedded.Options{DataDir: t.TempDir(), Buckets: []string{"bkt"}, Addr: "localhost:0",
		AccessKeyID: "trial", SecretAccessKey: "trial-secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") && !strings.HasPrefix(srv.Endpoint(), "http://[::1]:") {
		t.Errorf("localhost:0 serves on %s", srv.Endpoint())
	}
	st, err := s3store.New(context.Background(), s3store.Options{Bucket: "bkt", Endpoint: srv.Endpoint(), PathStyle: true, Region: "us-east-1",
		AccessKeyID: "trial", SecretAccessKey: "trial-secret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(context.Background(), "k", []byte("v"), store.PutOptions{}); err != nil {
		t.Fatalf("put with the keys the server was given: %v", err)
	}
}
