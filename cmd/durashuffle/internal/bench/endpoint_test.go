package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
)

// TestMemServerHTTPS: the endpoint bench combine runs on serves HTTPS on
// a certificate that the returned configuration trusts, and a client
// that does not trust it is refused.
func TestMemServerHTTPS(t *testing.T) {
	srv, tlsCfg, err := StartMemServerHTTPS(t.TempDir(), "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if !strings.HasPrefix(srv.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https", srv.Endpoint())
	}
	ctx := context.Background()
	st, err := s3store.New(ctx, s3store.Options{Bucket: "b", Endpoint: srv.Endpoint(), Region: "us-east-1", PathStyle: true,
		AccessKeyID: "bench", SecretAccessKey: "bench", HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "k", []byte("over tls"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	body, err := st.GetRange(ctx, "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if !bytes.Equal(got, []byte("over tls")) {
		t.Fatalf("read back %q", got)
	}
	if _, err := http.Get(srv.Endpoint() + "/b/k"); err == nil {
		t.Fatal("a client that does not trust the run's certificate was served")
	}
}
