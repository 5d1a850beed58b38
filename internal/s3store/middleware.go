package s3store

import (
	"context"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/durashuffle/durashuffle/store"
)

// countRequests records every HTTP request the client sends. It sits at the
// inner end of the deserialize step, right around the transport, so it sees
// each attempt exactly once with the raw status, before any error
// translation; retries above the store show up as extra requests, which is
// what a request count should measure.
type countRequests struct{ c *store.Counter }

func (countRequests) ID() string { return "durashuffle.CountRequests" }

func (m countRequests) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	out, md, err := next.HandleDeserialize(ctx, in)
	status := 0
	if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp != nil && resp.Response != nil {
		status = resp.StatusCode
	}
	m.c.Request(middleware.GetOperationName(ctx), status)
	return out, md, err
}

func addCounter(c *store.Counter) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Deserialize.Add(countRequests{c}, middleware.After)
	}
}
