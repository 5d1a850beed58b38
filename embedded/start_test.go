package embedded

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
)

// TestStartTemporary: Start("") serves from a temporary directory of its
// own, an S3 client with Credentials writes and reads there, and Close
// removes the directory.
func TestStartTemporary(t *testing.T) {
	srv, err := Start("", "bucket")
	if err != nil {
		t.Fatal(err)
	}
	dir := srv.tempDir
	if dir == "" {
		t.Fatal("Start(\"\") made no temporary directory")
	}
	ctx := context.Background()
	creds, err := srv.Credentials().Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3store.New(ctx, s3store.Options{Bucket: "bucket", Endpoint: srv.Endpoint(), Region: "us-east-1", PathStyle: true,
		AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "k", []byte("hello"), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	body, err := st.GetRange(ctx, "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "hello" {
		t.Fatalf("read back %q", b)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
		t.Fatalf("the data dir %s holds nothing after a put: %v %v", dir, entries, err)
	}
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", srv.Endpoint())
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left the temporary directory %s: %v", dir, err)
	}
}
