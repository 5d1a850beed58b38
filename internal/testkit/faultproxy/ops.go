package faultproxy

import (
	"net/http"
	"strings"
)

// Operation names the S3 operation of a path-style request the way the
// AWS SDK does (and store.Counter counts it): "UploadPart",
// "CompleteMultipartUpload", "GetObject", ... It tells operations apart by
// method, by whether the path names a key after the bucket, and by the
// sub-resource in the query. Virtual-hosted-style requests (the bucket in
// the host name) are not recognised; the proxy is for path-style
// endpoints such as MinIO, LocalStack and the embedded server.
func Operation(r *http.Request) string {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(path, "/")
	q := r.URL.Query()
	copySource := r.Header.Get("X-Amz-Copy-Source") != ""
	switch {
	case bucket == "":
		if r.Method == http.MethodGet {
			return "ListBuckets"
		}
	case key == "":
		switch r.Method {
		case http.MethodHead:
			return "HeadBucket"
		case http.MethodPut:
			return "CreateBucket"
		case http.MethodDelete:
			return "DeleteBucket"
		case http.MethodPost:
			if q.Has("delete") {
				return "DeleteObjects"
			}
		case http.MethodGet:
			switch {
			case q.Has("uploads"):
				return "ListMultipartUploads"
			case q.Get("list-type") == "2":
				return "ListObjectsV2"
			case q.Has("location"):
				return "GetBucketLocation"
			case q.Has("versioning"):
				return "GetBucketVersioning"
			default:
				return "ListObjects"
			}
		}
	default:
		switch r.Method {
		case http.MethodPut:
			switch {
			case q.Has("partNumber") && q.Has("uploadId") && copySource:
				return "UploadPartCopy"
			case q.Has("partNumber") && q.Has("uploadId"):
				return "UploadPart"
			case copySource:
				return "CopyObject"
			default:
				return "PutObject"
			}
		case http.MethodPost:
			switch {
			case q.Has("uploads"):
				return "CreateMultipartUpload"
			case q.Has("uploadId"):
				return "CompleteMultipartUpload"
			}
		case http.MethodDelete:
			if q.Has("uploadId") {
				return "AbortMultipartUpload"
			}
			return "DeleteObject"
		case http.MethodGet:
			if q.Has("uploadId") {
				return "ListParts"
			}
			return "GetObject"
		case http.MethodHead:
			return "HeadObject"
		}
	}
	return "Other"
}
