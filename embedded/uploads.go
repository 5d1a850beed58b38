package embedded

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"strings"

	"github.com/johannesboyne/gofakes3"
)

// emptyUploadLists answers ListMultipartUploads with an empty list where
// gofakes3 answers 404 NoSuchUpload: it does so for every bucket that has
// never had a multipart upload (its uploader keeps no entry for it). The
// bucket exists by then (gofakes3 checks that first), so the empty list is
// what S3 would say. The list is encoded from gofakes3's own result type.
func emptyUploadLists(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucket := strings.Trim(r.URL.Path, "/")
		if _, ok := r.URL.Query()["uploads"]; r.Method != http.MethodGet || !ok || bucket == "" || strings.Contains(bucket, "/") {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status == http.StatusNotFound && bytes.Contains(rec.body.Bytes(), []byte("<Code>NoSuchUpload</Code>")) {
			w.Header().Set("Content-Type", "application/xml")
			w.Write([]byte(xml.Header))
			xml.NewEncoder(w).Encode(gofakes3.ListMultipartUploadsResult{
				Bucket:     bucket,
				Prefix:     r.URL.Query().Get("prefix"),
				Delimiter:  r.URL.Query().Get("delimiter"),
				MaxUploads: gofakes3.DefaultMaxUploads,
			})
			return
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body.Bytes())
	})
}

// recorder buffers a response; listings of uploads are small.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(status int)      { r.status = status }
