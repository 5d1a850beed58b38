package gcsstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/durashuffle/durashuffle/store"
)

// classify turns an error from the SDK (or from reading a response body)
// into a *store.Error that carries its class: the sentinel it wraps and
// whether a retry may succeed. Code is the JSON API's error reason
// (notFound, conditionNotMet, rateLimitExceeded, ...), except that a 503
// whose reason is no throttling code says ServiceUnavailable: the service
// answers 503 when it wants fewer requests, and the retry layer backs off
// on the code.
func classify(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var already *store.Error
	if errors.As(err, &already) {
		return err
	}
	e := &store.Error{Op: op, Key: key, Err: err}
	var gerr *googleapi.Error
	switch {
	case errors.Is(err, storage.ErrObjectNotExist):
		// The SDK turns the JSON API's 404 into this sentinel.
		e.Status, e.Code = http.StatusNotFound, "notFound"
	case errors.Is(err, storage.ErrBucketNotExist):
		// A configuration error, not a missing object: a reader must not
		// conclude "this stage does not exist" from it.
		e.Status, e.Code = http.StatusNotFound, "bucketNotFound"
	case errors.As(err, &gerr):
		e.Status = gerr.Code
		if len(gerr.Errors) > 0 {
			e.Code = gerr.Errors[0].Reason
		}
	}
	switch {
	case e.Status == http.StatusTooManyRequests && e.Code == "":
		e.Code = "TooManyRequests"
	case e.Status == http.StatusServiceUnavailable && !store.IsThrottlingCode(e.Code):
		e.Code = "ServiceUnavailable"
	}
	switch {
	case e.Status == http.StatusNotFound && e.Code != "bucketNotFound":
		e.Err = fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case e.Status == http.StatusPreconditionFailed:
		e.Err = fmt.Errorf("%w: %w", store.ErrPreconditionFailed, err)
	case e.Status == http.StatusRequestedRangeNotSatisfiable:
		e.Err = fmt.Errorf("%w: %w", store.ErrInvalidRange, err)
	}
	e.Retryable = retryable(e.Status, e.Code, err)
	return e
}

// retryable decides whether the same request may succeed if sent again.
func retryable(status int, code string, err error) bool {
	// The caller gave up (context.DeadlineExceeded also claims to be a
	// net timeout), or the body read other bytes than it was handed.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrBodyChanged) {
		return false
	}
	if store.IsThrottlingCode(code) {
		return true
	}
	switch {
	case status >= 200 && status < 300:
		// The service said yes but its answer broke off on the way.
		return store.TransportRetryable(err)
	case status != 0:
		// 408: the request timed out at the service. 501 will be just
		// as unimplemented next time.
		return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || (status >= 500 && status != http.StatusNotImplemented)
	}
	return store.TransportRetryable(err)
}
