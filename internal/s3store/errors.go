package s3store

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/durashuffle/durashuffle/internal/neterr"
	"github.com/durashuffle/durashuffle/store"
)

// Service error codes, grouped by the class they put an error in.
var (
	notFoundCodes = map[string]bool{"NoSuchKey": true, "NoSuchUpload": true, "NotFound": true}

	// ConditionalRequestConflict (409) means another conditional write to
	// the key is in flight. For durashuffle's commit protocol that is a
	// lost race like 412: the other attempt is committing, and retrying
	// would at best turn into a 412 a moment later.
	preconditionCodes = map[string]bool{"PreconditionFailed": true, "ConditionalRequestConflict": true}

	// Codes worth retrying whatever their status. RequestTimeout and
	// IncompleteBody arrive as 400 but mean the connection stalled or was
	// cut while the body was in flight; the same request can succeed.
	// Throttling codes (store.IsThrottlingCode) are retried too.
	retryableCodes = map[string]bool{
		"RequestTimeout": true,
		"InternalError":  true,
		"IncompleteBody": true,
	}
)

// retryableCode says whether a service code is worth retrying whatever
// its status: a transient failure or a store asking to slow down.
func retryableCode(code string) bool { return retryableCodes[code] || store.IsThrottlingCode(code) }

// classify turns an error from the SDK (or from reading a response body)
// into a *store.Error that carries its class: the sentinel it wraps and
// whether a retry may succeed. It is the one place that decides; the retry
// layer above only asks store.IsTransient.
func classify(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var already *store.Error
	if errors.As(err, &already) {
		return err
	}
	e := &store.Error{Op: op, Key: key, Err: err}

	// The SDK wraps the HTTP response error in its own types; asking for
	// the method rather than a concrete type finds the status through all
	// of them (errors.As on *smithyhttp.ResponseError would miss the
	// embedded copy inside awshttp.ResponseError).
	var withStatus interface{ HTTPStatusCode() int }
	if errors.As(err, &withStatus) {
		e.Status = withStatus.HTTPStatusCode()
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		e.Code = api.ErrorCode()
	}

	switch {
	case notFoundCodes[e.Code], e.Status == 404 && e.Code != "NoSuchBucket":
		// NoSuchBucket is a configuration error, not a missing object: a
		// reader must not conclude "this stage does not exist" from it.
		e.Err = fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case preconditionCodes[e.Code], e.Status == 412:
		e.Err = fmt.Errorf("%w: %w", store.ErrPreconditionFailed, err)
	case e.Code == "InvalidRange", e.Status == 416:
		e.Err = fmt.Errorf("%w: %w", store.ErrInvalidRange, err)
	case e.Code == "InvalidPart":
		e.Err = fmt.Errorf("%w: %w", store.ErrPartRejected, err)
	}
	e.Retryable = retryable(e.Status, e.Code, err)
	return e
}

// retryable decides whether the same request may succeed if sent again.
func retryable(status int, code string, err error) bool {
	// The caller gave up: retrying would defy them. This check comes first
	// because context.DeadlineExceeded also claims to be a net timeout.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrBodyChanged) {
		return false
	}
	if retryableCode(code) {
		return true
	}
	if status >= 200 && status < 300 {
		// The server said yes but its answer broke off on the way (a
		// truncated body fails to deserialize): the same request again
		// is the only way to learn the result.
		return retryableTransport(err)
	}
	if status != 0 {
		// 501 Not Implemented will be just as unimplemented next time.
		return status == 429 || (status >= 500 && status != 501)
	}
	return retryableTransport(err)
}

// retryableTransport classifies failures where no response arrived.
func retryableTransport(err error) bool { return neterr.Retryable(err) }
