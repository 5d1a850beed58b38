package faultproxy

import (
	"net/http"
	"strings"

	"github.com/durashuffle/durashuffle/internal/opname"
)

// Service is the object store API a request speaks, which decides how
// the proxy names its operation and words its error answers.
type Service string

// The services the proxy tells apart.
const (
	ServiceS3    Service = "s3"    // path-style S3: MinIO, LocalStack, the embedded server
	ServiceAzure Service = "azure" // Azure Blob Storage's REST API: Azurite
	ServiceGCS   Service = "gcs"   // Google Cloud Storage's JSON API: fake-gcs-server
)

// ServiceOf tells which API r speaks: Azure's requests carry the
// x-ms-version header every Blob service call must send; the JSON API's
// paths start with /storage/v1/ (or /upload/ or /download/ before it);
// anything else is taken for S3.
func ServiceOf(r *http.Request) Service {
	switch {
	case r.Header.Get("X-Ms-Version") != "":
		return ServiceAzure
	case jsonAPIPath(r.URL.Path):
		return ServiceGCS
	}
	return ServiceS3
}

// Operation names the operation of r in its own service's words, as the
// store of that service counts it (store.Counter; package opname names
// Azure's and GCS's for their stores and for the proxy alike): S3's "UploadPart",
// "CompleteMultipartUpload", "GetObject", ...; Azure's "PutBlock",
// "PutBlockList", "PutBlob", "GetBlob", "ListBlobs", ...; the JSON API's
// "objects.insert", "objects.compose", "objects.get" (a read is
// objects.get with alt=media), "objects.list", "objects.delete", ...
func Operation(r *http.Request) string {
	switch ServiceOf(r) {
	case ServiceAzure:
		return opname.Azure(r)
	case ServiceGCS:
		return opname.GCS(r)
	}
	return s3Operation(r)
}

// jsonAPIPath reports whether path is one of GCS's JSON API: under
// /storage/v1/, or /upload/ or /download/ before it.
func jsonAPIPath(path string) bool {
	for _, root := range []string{"/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/"} {
		if strings.HasPrefix(path, root) {
			return true
		}
	}
	return false
}

// s3Operation names the S3 operation of a path-style request the way the
// AWS SDK does: "UploadPart", "CompleteMultipartUpload", "GetObject", ...
// It tells operations apart by method, by whether the path names a key
// after the bucket, and by the sub-resource in the query.
// Virtual-hosted-style requests (the bucket in the host name) are not
// recognised.
func s3Operation(r *http.Request) string {
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
