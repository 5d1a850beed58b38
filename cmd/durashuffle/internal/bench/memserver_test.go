package bench

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/durashuffle/durashuffle/internal/s3store"
	"github.com/durashuffle/durashuffle/store"
	"github.com/durashuffle/durashuffle/store/storetest"
)

// TestMemServerContract holds the bench's in-memory endpoint, which
// BENCHMARKS.md's numbers are measured on, to the store contract, through
// the same S3 store the client uses.
func TestMemServerContract(t *testing.T) {
	srv, err := StartMemServer("contract")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	st, err := s3store.New(context.Background(), s3store.Options{Bucket: "contract", Endpoint: srv.Endpoint(), Region: "us-east-1",
		PathStyle: true, AccessKeyID: "bench", SecretAccessKey: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, st)
}

// TestMemServerPartNumbers: part numbers run from 1 to store.MaxParts, as
// on S3; outside, UploadPart is a 400 InvalidArgument.
func TestMemServerPartNumbers(t *testing.T) {
	srv := &MemServer{buckets: map[string]map[string]*memObject{"b": {}}, uploads: map[string]*memUpload{}}
	do := func(method, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader("part")))
		return rec
	}
	init := do(http.MethodPost, "/b/k?uploads")
	var res struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.Unmarshal(init.Body.Bytes(), &res); err != nil || init.Code != http.StatusOK || res.UploadID == "" {
		t.Fatalf("CreateMultipartUpload: %d %q %v", init.Code, init.Body, err)
	}
	for _, c := range []struct {
		n    int
		code int
	}{{1, http.StatusOK}, {store.MaxParts, http.StatusOK}, {0, http.StatusBadRequest}, {store.MaxParts + 1, http.StatusBadRequest}} {
		rec := do(http.MethodPut, fmt.Sprintf("/b/k?uploadId=%s&partNumber=%d", res.UploadID, c.n))
		if rec.Code != c.code || c.code == http.StatusBadRequest && !strings.Contains(rec.Body.String(), "InvalidArgument") {
			t.Errorf("UploadPart %d: %d %q, want %d", c.n, rec.Code, rec.Body, c.code)
		}
	}
}
