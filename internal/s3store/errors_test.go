package s3store

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/durashuffle/durashuffle/store"
)

// respErr builds the error chain the SDK returns for an HTTP error response.
func respErr(status int, code string) error {
	var inner error = &smithy.GenericAPIError{Code: code, Message: "test message"}
	if code == "" {
		inner = errors.New("http error with no body")
	}
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: "PutObject",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      inner,
			},
			RequestID: "req-1",
		},
	}
}

// truncated200 is a 200 whose body broke off while being deserialized.
func truncated200() error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: "CompleteMultipartUpload",
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 200}},
				Err:      &smithy.DeserializationError{Err: io.ErrUnexpectedEOF},
			},
		},
	}
}

// sendErr builds the chain for a request that got no response.
func sendErr(err error) error {
	return &smithy.OperationError{ServiceID: "S3", OperationName: "UploadPart",
		Err: &smithyhttp.RequestSendError{Err: err}}
}

func TestClassify(t *testing.T) {
	opErr := func(op string, err error) error { return &net.OpError{Op: op, Net: "tcp", Err: err} }
	for _, c := range []struct {
		name      string
		err       error
		sentinel  error
		status    int
		code      string
		retryable bool
	}{
		{"404 NoSuchKey", respErr(404, "NoSuchKey"), store.ErrNotFound, 404, "NoSuchKey", false},
		{"200 answer cut short", truncated200(), nil, 200, "", true},
		{"404 NoSuchUpload", respErr(404, "NoSuchUpload"), store.ErrNotFound, 404, "NoSuchUpload", false},
		{"404 HEAD without body", respErr(404, "NotFound"), store.ErrNotFound, 404, "NotFound", false},
		{"404 with unknown code", respErr(404, ""), store.ErrNotFound, 404, "", false},
		{"404 NoSuchBucket is not a missing key", respErr(404, "NoSuchBucket"), nil, 404, "NoSuchBucket", false},
		{"412 PreconditionFailed", respErr(412, "PreconditionFailed"), store.ErrPreconditionFailed, 412, "PreconditionFailed", false},
		{"409 ConditionalRequestConflict", respErr(409, "ConditionalRequestConflict"), store.ErrPreconditionFailed, 409, "ConditionalRequestConflict", false},
		{"416 InvalidRange", respErr(416, "InvalidRange"), store.ErrInvalidRange, 416, "InvalidRange", false},
		{"400 InvalidPart", respErr(400, "InvalidPart"), store.ErrPartRejected, 400, "InvalidPart", false},
		{"503 SlowDownWrite (MinIO without write quorum)", respErr(503, "SlowDownWrite"), nil, 503, "SlowDownWrite", true},
		{"503 SlowDown", respErr(503, "SlowDown"), nil, 503, "SlowDown", true},
		{"500 InternalError", respErr(500, "InternalError"), nil, 500, "InternalError", true},
		{"502 without body", respErr(502, ""), nil, 502, "", true},
		{"501 NotImplemented", respErr(501, "NotImplemented"), nil, 501, "NotImplemented", false},
		{"429 too many requests", respErr(429, ""), nil, 429, "", true},
		{"400 RequestTimeout", respErr(400, "RequestTimeout"), nil, 400, "RequestTimeout", true},
		{"400 IncompleteBody", respErr(400, "IncompleteBody"), nil, 400, "IncompleteBody", true},
		{"400 BadDigest", respErr(400, "BadDigest"), nil, 400, "BadDigest", false},
		{"400 InvalidRequest", respErr(400, "InvalidRequest"), nil, 400, "InvalidRequest", false},
		{"403 AccessDenied", respErr(403, "AccessDenied"), nil, 403, "AccessDenied", false},
		{"403 RequestTimeTooSkewed", respErr(403, "RequestTimeTooSkewed"), nil, 403, "RequestTimeTooSkewed", false},
		{"connection reset", sendErr(opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))), nil, 0, "", true},
		{"bare ECONNRESET", syscall.ECONNRESET, nil, 0, "", true},
		{"connection refused", sendErr(opErr("dial", syscall.ECONNREFUSED)), nil, 0, "", true},
		{"broken pipe", sendErr(opErr("write", syscall.EPIPE)), nil, 0, "", true},
		{"unexpected EOF", sendErr(io.ErrUnexpectedEOF), nil, 0, "", true},
		{"bare unexpected EOF reading a body", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), nil, 0, "", true},
		{"EOF", sendErr(io.EOF), nil, 0, "", true},
		{"net timeout", sendErr(opErr("read", timeoutErr{})), nil, 0, "", true},
		{"other send failure", sendErr(errors.New("http: server closed idle connection")), nil, 0, "", true},
		{"caller canceled", sendErr(context.Canceled), nil, 0, "", false},
		{"caller canceled (smithy)", &smithy.CanceledError{Err: context.Canceled}, nil, 0, "", false},
		{"caller deadline", sendErr(context.DeadlineExceeded), nil, 0, "", false},
		{"bare deadline", context.DeadlineExceeded, nil, 0, "", false},
		{"unknown certificate authority", sendErr(x509.UnknownAuthorityError{}), nil, 0, "", false},
		{"host not found", sendErr(&net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}), nil, 0, "", false},
		{"plain error", errors.New("something odd"), nil, 0, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := classify("PutObject", "k/1", c.err)
			var se *store.Error
			if !errors.As(err, &se) {
				t.Fatalf("classify returned %T, want *store.Error", err)
			}
			if se.Op != "PutObject" || se.Key != "k/1" {
				t.Errorf("Op, Key = %q, %q", se.Op, se.Key)
			}
			if se.Status != c.status || se.Code != c.code {
				t.Errorf("Status, Code = %d, %q; want %d, %q", se.Status, se.Code, c.status, c.code)
			}
			if se.Retryable != c.retryable || store.IsTransient(err) != c.retryable {
				t.Errorf("Retryable = %v, IsTransient = %v; want %v", se.Retryable, store.IsTransient(err), c.retryable)
			}
			for _, s := range []error{store.ErrNotFound, store.ErrPreconditionFailed, store.ErrInvalidRange} {
				if got, want := errors.Is(err, s), s == c.sentinel; got != want {
					t.Errorf("errors.Is(err, %v) = %v, want %v", s, got, want)
				}
			}
			if !errors.Is(err, c.err) {
				t.Errorf("the original error is no longer in the chain: %v", err)
			}
		})
	}
}

func TestClassifyKeepsStoreErrors(t *testing.T) {
	orig := &store.Error{Op: "GetObject", Key: "a", Retryable: true}
	if got := classify("PutObject", "b", fmt.Errorf("wrapped: %w", orig)); !errors.Is(got, orig) {
		t.Errorf("classify re-wrapped an already classified error: %v", got)
	}
	if classify("PutObject", "b", nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

func TestEncodeCRC32C(t *testing.T) {
	// CRC32C("123456789") is the standard check value 0xE3069283.
	if got, want := encodeCRC32C(0xE3069283), "4waSgw=="; got != want {
		t.Errorf("encodeCRC32C = %q, want %q", got, want)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
