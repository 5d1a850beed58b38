package faultproxy

import (
	"net/http"
	"strings"
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
	case gcsPath(r.URL.Path) != "":
		return ServiceGCS
	}
	return ServiceS3
}

// Operation names the operation of r in its own service's words, as the
// store of that service counts it (store.Counter): S3's "UploadPart",
// "CompleteMultipartUpload", "GetObject", ...; Azure's "PutBlock",
// "PutBlockList", "PutBlob", "GetBlob", "ListBlobs", ...; the JSON API's
// "objects.insert", "objects.compose", "objects.get" (a read is
// objects.get with alt=media), "objects.list", "objects.delete", ...
func Operation(r *http.Request) string {
	switch ServiceOf(r) {
	case ServiceAzure:
		return azureOperation(r)
	case ServiceGCS:
		return gcsOperation(r)
	}
	return s3Operation(r)
}

// azureOperation names a Blob service request as Azure's REST reference
// does, from its method and its restype and comp parameters.
func azureOperation(r *http.Request) string {
	q := r.URL.Query()
	restype, comp := q.Get("restype"), q.Get("comp")
	switch {
	case comp == "batch":
		return "BlobBatch"
	case restype == "container" && comp == "list":
		return "ListBlobs"
	case restype == "container":
		switch r.Method {
		case http.MethodPut:
			return "CreateContainer"
		case http.MethodDelete:
			return "DeleteContainer"
		}
		return "GetContainerProperties"
	case comp == "block":
		return "PutBlock"
	case comp == "blocklist" && r.Method == http.MethodPut:
		return "PutBlockList"
	case comp == "blocklist":
		return "GetBlockList"
	case comp == "metadata" && r.Method == http.MethodPut:
		return "SetBlobMetadata"
	case comp == "properties" && r.Method == http.MethodPut:
		return "SetBlobProperties"
	case comp != "":
		return r.Method + " comp=" + comp
	}
	switch r.Method {
	case http.MethodPut:
		if r.Header.Get("X-Ms-Copy-Source") != "" {
			return "CopyBlob"
		}
		return "PutBlob"
	case http.MethodGet:
		return "GetBlob"
	case http.MethodHead:
		return "GetBlobProperties"
	case http.MethodDelete:
		return "DeleteBlob"
	}
	return "Other"
}

// gcsPath is the JSON API resource path of a request path, after
// /storage/v1/ ("b/BUCKET/o/OBJECT"), with "upload/" before it for a
// media upload; "" if the path is no JSON API path.
func gcsPath(path string) string {
	for _, root := range []string{"/storage/v1/", "/download/storage/v1/"} {
		if rest, ok := strings.CutPrefix(path, root); ok {
			return rest
		}
	}
	if rest, ok := strings.CutPrefix(path, "/upload/storage/v1/"); ok {
		return "upload/" + rest
	}
	return ""
}

// gcsOperation names a JSON API request by the method it calls, as
// gcsstore counts it: resource.method, from the resource path (object
// names are escaped, so they hold no slash) and the HTTP verb.
func gcsOperation(r *http.Request) string {
	rest := gcsPath(r.URL.EscapedPath())
	upload := strings.HasPrefix(rest, "upload/")
	segs := strings.Split(strings.Trim(strings.TrimPrefix(rest, "upload/"), "/"), "/")
	if segs[0] != "b" {
		return "Other"
	}
	m := r.Method
	switch {
	case len(segs) == 1 && m == http.MethodGet:
		return "buckets.list"
	case len(segs) == 1 && m == http.MethodPost:
		return "buckets.insert"
	case len(segs) == 2 && m == http.MethodDelete:
		return "buckets.delete"
	case len(segs) == 2:
		return "buckets.get"
	case len(segs) == 3 && (upload || m == http.MethodPost):
		return "objects.insert"
	case len(segs) == 3:
		return "objects.list"
	case len(segs) == 4 && m == http.MethodDelete:
		return "objects.delete"
	case len(segs) == 4 && m == http.MethodPatch:
		return "objects.patch"
	case len(segs) == 4:
		return "objects.get"
	case len(segs) >= 5:
		return "objects." + segs[4] // compose, rewriteTo, copyTo
	}
	return "Other"
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
