package embedded_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/embedded"
	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
)

func start(t *testing.T, dir string, buckets ...string) *embedded.Server {
	t.Helper()
	srv, err := embedded.Start(dir, buckets...)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func newStore(t *testing.T, srv *embedded.Server, bucket string) *s3store.Store {
	t.Helper()
	s, err := s3store.New(context.Background(), s3store.Options{
		Bucket: bucket, Endpoint: srv.Endpoint(), PathStyle: true, Region: "us-east-1",
		Credentials: srv.Credentials(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func read(t *testing.T, s store.Reader, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := s.GetRange(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPersistsAcrossRestart: objects live in the data dir, so a sidecar
// restarted on the same dir still serves committed stages.
func TestPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	srv := start(t, dir, "durashuffle")
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("endpoint %q is not on loopback", srv.Endpoint())
	}
	want := []byte(`{"committed":true}`)
	if err := newStore(t, srv, "durashuffle").Put(context.Background(), "q/stage-0/manifest.json", want, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := http.Get(srv.Endpoint()); err == nil {
		t.Error("server still answers after Close")
	}

	srv = start(t, dir, "durashuffle") // bucket exists now: not an error
	defer srv.Close()
	if got := read(t, newStore(t, srv, "durashuffle"), "q/stage-0/manifest.json"); !bytes.Equal(got, want) {
		t.Errorf("after restart read %q, want %q", got, want)
	}
}

func TestStartRejectsBadBucket(t *testing.T) {
	if srv, err := embedded.Start(t.TempDir(), "Not_A_Bucket"); err == nil {
		srv.Close()
		t.Fatal("Start accepted an invalid bucket name")
	}
}

// rawPut sends a PUT the SDK would never send, signed with the server's
// credentials, to see what the server does with other clients' bodies.
func rawPut(t *testing.T, srv *embedded.Server, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(sign(t, srv.Credentials(), req, header["x-amz-content-sha256"]))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBodies(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	s := newStore(t, srv, "bkt")
	ctx := context.Background()
	id, err := s.CreateMultipart(ctx, "mp")
	if err != nil {
		t.Fatal(err)
	}
	sig := strings.Repeat("0", 64)
	signedChunks := "5;chunk-signature=" + sig + "\r\nhello\r\n0;chunk-signature=" + sig + "\r\n\r\n"

	for _, c := range []struct {
		name       string
		path       string
		header     map[string]string
		body       string
		wantStatus int
		wantCode   string
		wantStored string // "" when the request must fail
	}{
		{"bad crc32c", "/bkt/k1", map[string]string{"x-amz-checksum-crc32c": "AAAAAA=="}, "hello", 400, "BadDigest", ""},
		{"malformed crc32c", "/bkt/k2", map[string]string{"x-amz-checksum-crc32c": "not base64"}, "hello", 400, "InvalidArgument", ""},
		// CRC32C("hello") = 0x9a71bb4c
		{"good crc32c", "/bkt/k3", map[string]string{"x-amz-checksum-crc32c": "mnG7TA=="}, "hello", 200, "", "hello"},
		{"trailer chunks refused", "/bkt/k4", map[string]string{
			"x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "content-encoding": "aws-chunked",
			"x-amz-decoded-content-length": "5", "x-amz-trailer": "x-amz-checksum-crc32c",
		}, "5\r\nhello\r\n0\r\nx-amz-checksum-crc32c:mnG7TA==\r\n\r\n", 501, "NotImplemented", ""},
		{"signed chunks on a part refused", "/bkt/mp?partNumber=1&uploadId=" + id, map[string]string{
			"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "x-amz-decoded-content-length": "5",
		}, signedChunks, 501, "NotImplemented", ""},
		// gofakes3 decodes these itself (minio-go sends them over http).
		{"signed chunks on put", "/bkt/k5", map[string]string{
			"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "x-amz-decoded-content-length": "5",
		}, signedChunks, 200, "", "hello"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := rawPut(t, srv, srv.Endpoint()+c.path, c.header, c.body)
			if status != c.wantStatus || !strings.Contains(body, "<Code>"+c.wantCode+"</Code>") && c.wantCode != "" {
				t.Fatalf("got %d %s, want %d %s", status, body, c.wantStatus, c.wantCode)
			}
			key := strings.TrimPrefix(strings.SplitN(c.path, "?", 2)[0], "/bkt/")
			if c.wantStored != "" {
				if got := read(t, s, key); string(got) != c.wantStored {
					t.Errorf("stored %q, want %q", got, c.wantStored)
				}
				return
			}
			if key == "mp" {
				return
			}
			if _, err := s.GetRange(ctx, key, 0, -1); !store.IsNotFound(err) {
				t.Errorf("a failed put left an object behind (GetRange: %v)", err)
			}
		})
	}
}

// TestEmptyUploadList: a bucket that never had an upload lists none
// (gofakes3 alone answers 404 NoSuchUpload).
func TestEmptyUploadList(t *testing.T) {
	srv := start(t, t.TempDir(), "bkt")
	defer srv.Close()
	ups, err := newStore(t, srv, "bkt").ListUploads(context.Background(), "")
	if err != nil || len(ups) != 0 {
		t.Fatalf("ListUploads = %v, %v; want none", ups, err)
	}
	req, err := http.NewRequest(http.MethodGet, srv.Endpoint()+"/no-such-bucket?uploads", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(sign(t, srv.Credentials(), req, ""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("uploads of a missing bucket: HTTP %d, want 404", resp.StatusCode)
	}
}
