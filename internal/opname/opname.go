// Package opname names an object store request by the operation it
// calls, in its service's own words, for the stores' request counters and
// the fault proxy, which must agree on them.
package opname

import (
	"net/http"
	"strings"
)

// Azure names a Blob service request as Azure's REST reference does
// (PutBlob, PutBlock, PutBlockList, GetBlob, ListBlobs, BlobBatch, ...),
// from its method and its restype and comp parameters.
func Azure(r *http.Request) string {
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
	case comp != "":
		return r.Method + " comp=" + comp
	}
	switch r.Method {
	case http.MethodPut:
		return "PutBlob"
	case http.MethodGet:
		return "GetBlob"
	case http.MethodHead:
		return "GetBlobProperties"
	case http.MethodDelete:
		return "DeleteBlob"
	}
	return r.Method
}

// GCS names a JSON API request by the method it calls (objects.insert,
// objects.get, objects.list, objects.delete, objects.compose, buckets.get,
// ...): the resource path after /storage/v1/ (object names are escaped,
// so they hold no slash) and the HTTP verb; "other" for a request of no
// JSON API method.
func GCS(req *http.Request) string {
	path := req.URL.EscapedPath()
	i := strings.Index(path, "/storage/v1/")
	if i < 0 {
		return "other"
	}
	upload := strings.HasSuffix(path[:i], "/upload")
	segs := strings.Split(strings.Trim(path[i+len("/storage/v1/"):], "/"), "/")
	if len(segs) == 0 || segs[0] != "b" {
		return "other"
	}
	switch len(segs) {
	case 1:
		return verb("buckets", req.Method, "list", "insert")
	case 2:
		return verb("buckets", req.Method, "get", "")
	case 3:
		if upload {
			return "objects.insert"
		}
		return verb("objects", req.Method, "list", "insert")
	case 4:
		return verb("objects", req.Method, "get", "")
	case 5:
		if segs[4] == "compose" {
			return "objects.compose"
		}
		return "objects." + segs[4]
	}
	return "other"
}

// verb is resource.get (or the collection's list) for GET, post for
// POST, delete, patch or update by HTTP verb.
func verb(resource, httpMethod, get, post string) string {
	switch httpMethod {
	case http.MethodGet, http.MethodHead:
		return resource + "." + get
	case http.MethodPost:
		if post != "" {
			return resource + "." + post
		}
	case http.MethodDelete:
		return resource + ".delete"
	case http.MethodPatch:
		return resource + ".patch"
	case http.MethodPut:
		return resource + ".update"
	}
	return resource + "." + strings.ToLower(httpMethod)
}
