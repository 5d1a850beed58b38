package azstore

import (
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/durashuffle/durashuffle/store"
)

// countRequests records every HTTP request the client sends, by Azure's
// operation name, with the status it got (0: no response). It runs once
// per attempt (a per-retry policy; the SDK makes one attempt), so retries
// above the store show up as extra requests.
type countRequests struct{ c *store.Counter }

func (p countRequests) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	p.c.Request(operation(req.Raw()), status)
	return resp, err
}

// Operation names a Blob service request as the store's Counter does, so
// that a program counting the requests of an azblob client of its own
// names them alike.
func Operation(r *http.Request) string { return operation(r) }

// operation names a Blob service request as Azure's REST reference does,
// from its method and its restype and comp parameters.
func operation(r *http.Request) string {
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
