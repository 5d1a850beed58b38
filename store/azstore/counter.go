package azstore

import (
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/durashuffle/durashuffle/internal/opname"
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
	p.c.Request(opname.Azure(req.Raw()), status)
	return resp, err
}
