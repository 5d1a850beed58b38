package azstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/durashuffle/durashuffle/store"
)

// Azure's error codes (x-ms-error-code), grouped by the class they put an
// error in.
var (
	// ContainerNotFound is a configuration error, not a missing blob: a
	// reader must not conclude "this stage does not exist" from it.
	notFoundCodes = map[string]bool{"BlobNotFound": true}

	// A conditional create that lost: Put Blob and Put Block List with
	// If-None-Match: * answer 409 BlobAlreadyExists, other conditions
	// 412 ConditionNotMet.
	preconditionCodes = map[string]bool{"BlobAlreadyExists": true, "ConditionNotMet": true}

	// Codes worth retrying whatever their status. Throttling codes
	// (store.IsThrottlingCode: ServerBusy, OperationTimedOut) are
	// retried too; ContainerBeingDeleted (409) passes within about 30
	// seconds of a container's deletion.
	retryableCodes = map[string]bool{"InternalError": true, "ContainerBeingDeleted": true}
)

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
	e := &store.Error{Op: op, Key: key, Err: redactURL(err)}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		e.Status, e.Code = re.StatusCode, re.ErrorCode
		e.Err = &serviceError{msg: serviceMessage(err, re), err: err}
	}
	switch {
	// A 404 with another code (ContainerNotFound, or ResourceNotFound from
	// an endpoint that names no account) is a configuration error.
	case notFoundCodes[e.Code], e.Status == 404 && e.Code == "":
		e.Err = fmt.Errorf("%w: %w", store.ErrNotFound, e.Err)
	case preconditionCodes[e.Code], e.Status == 412:
		e.Err = fmt.Errorf("%w: %w", store.ErrPreconditionFailed, e.Err)
	case e.Code == "InvalidRange", e.Status == 416:
		e.Err = fmt.Errorf("%w: %w", store.ErrInvalidRange, e.Err)
	case e.Code == "InvalidBlockList":
		e.Err = fmt.Errorf("%w: %w", store.ErrPartRejected, e.Err)
	}
	e.Retryable = retryable(e.Status, e.Code, err)
	return e
}

// redactURL is err with the query of the URL in an error from the HTTP
// client (a request that got no answer: reset, stalled, refused) hidden
// from its message, where a connection string's shared access signature
// would otherwise reach every log that prints it.
func redactURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) || !strings.Contains(ue.URL, "?") {
		return err
	}
	hidden := "(a URL that does not parse)"
	if u, perr := url.Parse(ue.URL); perr == nil {
		u.RawQuery = "REDACTED"
		hidden = u.String()
	}
	return &serviceError{msg: strings.ReplaceAll(err.Error(), ue.URL, hidden), err: err}
}

// serviceError is an SDK response error told in one line: the SDK's own
// message is a page of the request and the response body.
type serviceError struct {
	msg string
	err error
}

func (e *serviceError) Error() string { return e.msg }
func (e *serviceError) Unwrap() error { return e.err }

// messageRE finds the first line of the Message of an Azure error body.
var messageRE = regexp.MustCompile(`<Message>([^<\n]*)`)

// serviceMessage is err's message up to the SDK's response error, with
// the service's Message in place of the SDK's page.
func serviceMessage(err error, re *azcore.ResponseError) string {
	var msg string
	if re.RawResponse != nil {
		if body, berr := runtime.Payload(re.RawResponse); berr == nil {
			if m := messageRE.FindSubmatch(body); m != nil {
				msg = strings.TrimSpace(string(m[1]))
			}
		}
	}
	if msg == "" {
		msg = "the service answered an error"
	}
	// What the store wrapped around the SDK's error ("part 3 (...): ").
	if full, inner := err.Error(), re.Error(); strings.HasSuffix(full, inner) {
		msg = strings.TrimSuffix(full, inner) + msg
	}
	return msg
}

// retryable decides whether the same request may succeed if sent again.
func retryable(status int, code string, err error) bool {
	// The caller gave up: retrying would defy them. This check comes first
	// because context.DeadlineExceeded also claims to be a net timeout.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrBodyChanged) {
		return false
	}
	if retryableCodes[code] || store.IsThrottlingCode(code) {
		return true
	}
	if status != 0 {
		// 501 Not Implemented will be just as unimplemented next time.
		return status == 429 || (status >= 500 && status != 501)
	}
	return store.TransportRetryable(err)
}
