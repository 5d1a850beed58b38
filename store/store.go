// Package store defines the object-store interfaces that durashuffle's core
// is written against, and the error classes every implementation reports.
// It imports no SDK: the S3 implementation lives in internal/s3store.
// Retry and metrics are wrappers of the store, assembled where the program
// is wired; requests are counted inside the S3 implementation (Counter),
// and concurrency is bounded by the upload pool and the readers, not by a
// wrapper.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Sentinel errors. Implementations wrap them (errors.Is) so callers can
// branch on the class without knowing the backend.
var (
	// ErrNotFound: the key (or upload) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPreconditionFailed: a conditional put lost (the key already exists).
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrInvalidRange: a ranged GET asked for bytes past the object's end.
	ErrInvalidRange = errors.New("invalid range")
	// ErrPartRejected: CompleteMultipartUpload refused a part it had
	// acknowledged (S3's 400 InvalidPart), so the upload cannot be
	// completed as sent. The same request fails again (not retryable
	// here), but a fresh upload may succeed: MinIO answers it after a node
	// of an erasure set restarts (its quorum tie-break can discard parts
	// written while another node was marked offline), versitygw for an
	// upload that no longer exists.
	ErrPartRejected = errors.New("part rejected")
	// ErrBodyChanged: a request's body read back other bytes than were
	// handed over (a file changed on disk). Sent again, it reads the same
	// bytes: not retryable.
	ErrBodyChanged = errors.New("body changed")
)

// Error is what implementations return for a failed request: the operation,
// the key, the HTTP status and service code when there was a response, and
// whether a retry may succeed.
type Error struct {
	Op        string // SDK operation name, e.g. "UploadPart"
	Key       string
	Status    int    // HTTP status, 0 when no response arrived
	Code      string // service error code, e.g. "SlowDown"
	Retryable bool
	Err       error
}

func (e *Error) Error() string {
	s := e.Op
	if e.Key != "" {
		s += " " + e.Key
	}
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// IsTransient reports whether the request that failed with err is worth
// sending again: a store error marked retryable (5xx, SlowDown,
// RequestTimeout, resets, timeouts) and not a cancelled or expired caller
// context. It is the retry layer's question, about one request; whether a
// failed task is worth running again is durashuffle.IsRetryable's.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *Error
	if errors.As(err, &se) {
		return se.Retryable
	}
	return false
}

// throttlingCodes are the service codes of a store asking its client to
// slow down: S3's SlowDown, MinIO's SlowDownWrite and SlowDownRead
// (without quorum), the AWS-wide Throttling, ThrottlingException and
// RequestLimitExceeded, the generic ServiceUnavailable and
// TooManyRequests, Azure Storage's ServerBusy (503) and
// OperationTimedOut (500), its answers to an account or partition over
// its scalability targets, and Google Cloud Storage's 429 reasons
// rateLimitExceeded and userRateLimitExceeded. One list: the store retries them, and the
// retry layer counts them as throttling (the upload pool backs off on it).
var throttlingCodes = map[string]bool{
	"SlowDown": true, "SlowDownWrite": true, "SlowDownRead": true,
	"Throttling": true, "ThrottlingException": true, "RequestLimitExceeded": true,
	"ServiceUnavailable": true, "TooManyRequests": true,
	"ServerBusy": true, "OperationTimedOut": true,
	"rateLimitExceeded": true, "userRateLimitExceeded": true,
}

// IsThrottlingCode says whether a service error code asks the client to
// slow down.
func IsThrottlingCode(code string) bool { return throttlingCodes[code] }

// IsNotFound reports whether err means the key does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// PutOptions modify a single-object put.
type PutOptions struct {
	// IfNoneMatch makes the put conditional on the key not existing
	// (If-None-Match: *). A lost race returns ErrPreconditionFailed.
	IfNoneMatch bool
	// CRC32C, when non-nil, is sent as the object's checksum and verified
	// by the server.
	CRC32C *uint32
	// ContentType of the object; empty means application/octet-stream.
	ContentType string
}

// Part is one uploaded part of a multipart upload.
type Part struct {
	Number int32
	ETag   string
	CRC32C *uint32 // checksum sent with the part, echoed on Complete
	Size   int64
}

// ObjectInfo describes a listed object.
type ObjectInfo struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// UploadInfo describes an incomplete multipart upload.
type UploadInfo struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// Reader reads objects. Safe for concurrent use.
type Reader interface {
	// GetRange returns length bytes of key from offset off; length < 0
	// reads to the end. The caller closes the body. A key that does not
	// exist returns ErrNotFound; a range past the end ErrInvalidRange.
	GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
}

// MaxParts is S3's limit on parts per multipart upload: part numbers run
// from 1 to MaxParts.
const MaxParts = 10000

// MinPartSize and MaxPartSize are S3's limits on a multipart upload's
// part sizes: every part but the last at least MinPartSize, each at most
// MaxPartSize.
const (
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
)

// Writer writes whole objects and multipart uploads. Safe for concurrent
// use. Bodies are held so that a retry layer can replay them: a Put's
// is a byte slice, a part's a Body.
type Writer interface {
	// Put writes body as key. Idempotent unless opts.IfNoneMatch is set.
	Put(ctx context.Context, key string, body []byte, opts PutOptions) error
	// CreateMultipart starts a multipart upload and returns its ID.
	CreateMultipart(ctx context.Context, key string) (uploadID string, err error)
	// UploadPart uploads part number n (1-based) of upload uploadID and
	// returns it as CompleteMultipart takes it: its number, ETag, size
	// and the CRC32C sent with it (nil when none was). It is the one
	// way a part is sent, however its bytes are held. Idempotent:
	// re-uploading a part replaces it. Each attempt reads body from its
	// first byte (body.Reader), so a retry layer may call it again with
	// the same body. A body with a CRC32C (WithCRC32C) is sent with it
	// and the store refuses bytes that do not match (400 BadDigest). A
	// streamed body is sent as it is read, with its CRC32C computed on
	// the way and checked by the store after the bytes (S3's trailer);
	// the returned part carries the CRC32C the store acknowledged. A
	// store that does not say it streams (PartStreamer) may refuse a
	// streamed body. Any other body without a CRC32C is sent with none.
	UploadPart(ctx context.Context, key, uploadID string, n int32, body Body) (Part, error)
	// CompleteMultipart assembles parts (ascending numbers) into key.
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) error
	// AbortMultipart discards an upload and its parts. Aborting an upload
	// that no longer exists returns nil or ErrNotFound (MinIO answers a
	// repeated abort with success, S3 with 404 NoSuchUpload).
	AbortMultipart(ctx context.Context, key, uploadID string) error
}

// PartStreamer is a store that may say it takes streamed part bodies
// (StreamBody) on this endpoint: S3 sends the CRC32C of a body whose
// bytes are not known in advance in an aws-chunked trailer, which the
// AWS SDK sends only over TLS. A store that is no PartStreamer takes
// none.
type PartStreamer interface {
	// StreamsParts reports whether UploadPart takes a streamed body.
	StreamsParts() bool
}

// Lister lists keys and incomplete uploads. Safe for concurrent use.
type Lister interface {
	// List returns the objects under prefix in key order. With a non-empty
	// delimiter it also returns the common prefixes (like S3's "folders")
	// and the objects directly under prefix only.
	List(ctx context.Context, prefix, delimiter string) (objects []ObjectInfo, prefixes []string, err error)
	// ListUploads returns the incomplete multipart uploads under prefix.
	ListUploads(ctx context.Context, prefix string) ([]UploadInfo, error)
}

// Deleter removes objects. Deleting a missing key is not an error.
type Deleter interface {
	Delete(ctx context.Context, keys ...string) error
}

// Store is everything durashuffle needs from an object store.
type Store interface {
	Reader
	Writer
	Lister
	Deleter
}

// BucketMaker is a store that can create its bucket: the S3 store, and
// the retry layer over it. Clients find it with As, so that the retry
// layer, which implements it too, is found before the store it wraps.
type BucketMaker interface {
	// EnsureBucket creates the store's bucket if it does not exist.
	// Idempotent and safe to race with other callers; a store that wraps
	// one that cannot create buckets returns an error wrapping
	// errors.ErrUnsupported.
	EnsureBucket(ctx context.Context) error
}
