package embedded

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
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

// maxCompleteBody is the longest CompleteMultipartUpload body partOrder
// reads: 10,000 parts of about 130 bytes each, with room.
const maxCompleteBody = 4 << 20

// partOrder refuses a CompleteMultipartUpload that lists its parts out
// of ascending part-number order with 400 InvalidPartOrder, as S3, MinIO
// and versitygw do; gofakes3 sorts the numbers before it checks their
// order, so it accepts any order and assembles the object in the order
// listed. Part numbers need not be consecutive.
func partOrder(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.URL.Query()["uploadId"]; r.Method != http.MethodPost || !ok || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxCompleteBody+1))
		// gofakes3 reads the body again, and answers what it cannot.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		var req gofakes3.CompleteMultipartUploadRequest
		if err != nil || len(body) > maxCompleteBody || xml.Unmarshal(body, &req) != nil {
			next.ServeHTTP(w, r)
			return
		}
		for i := 1; i < len(req.Parts); i++ {
			if prev, n := req.Parts[i-1].PartNumber, req.Parts[i].PartNumber; n <= prev {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(gofakes3.ErrInvalidPartOrder.Status())
				w.Write([]byte(xml.Header))
				xml.NewEncoder(w).Encode(gofakes3.ErrorResponse{Code: gofakes3.ErrInvalidPartOrder,
					Message: fmt.Sprintf("The list of parts was not in ascending order: part %d listed after part %d.", n, prev)})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
