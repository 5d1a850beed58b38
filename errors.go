package durashuffle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/durashuffle/durashuffle/chunker"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// The errors a caller tells apart with errors.Is. Those of bad input
// (ErrInvalidConfig, ErrPartitionCount, ErrPartition, ErrSchema, ErrBatch)
// meet a rerun again: IsRetryable is false for them.
var (
	// ErrInvalidConfig marks a configuration error (exit code 2 in the
	// CLI).
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrCommitGuard: the store does not enforce If-None-Match: * on
	// PutObject, so the commit was refused. Errors wrapping it name the
	// store's endpoint.
	ErrCommitGuard = errors.New("the store does not enforce If-None-Match: * on PutObject")
	// ErrPartitionCount marks WriterOptions.Partitions outside
	// [1, MaxPartitions].
	ErrPartitionCount = errors.New("partition count out of range")
	// ErrPartition marks a Write to a partition outside
	// [0, WriterOptions.Partitions), or a read of a partition the stage
	// does not have.
	ErrPartition = chunker.ErrPartition
	// ErrSchema marks a Write of a batch whose schema is not the
	// writer's (WriterOptions.Schema, or the first batch's).
	ErrSchema = chunker.ErrSchema
	// ErrBatch marks a Write of a batch that is not valid Arrow (see
	// Writer.Write for what is checked).
	ErrBatch = chunker.ErrBatch
	// ErrKey marks an encryption key that does not fit the stage: none
	// given for an encrypted stage, another key than its writers', one
	// given for a stage that is not encrypted, or a key source (key
	// file, KMS) that did not give one. Errors wrapping it name the stage
	// or the query.
	ErrKey = reader.ErrKey
)

// CleanupError is a writer failure (Commit or Abort) whose cleanup did not
// finish: some of the attempt's multipart uploads or data objects may
// still be in the bucket. None of it is visible to readers (no manifest
// was written); `durashuffle gc`, or the sidecar's periodic cleanup,
// removes it once it is older than its --older-than, and the bucket's
// lifecycle rule aborts the uploads. Each cleanup step is bounded by
// cleanup_timeout, so a store that hangs (MinIO without write quorum
// answers aborts and deletes only after minutes) cannot hold the writer.
//
// Unwrap returns the failure itself, not the cleanup's: IsRetryable and
// errors.Is see why the attempt failed.
type CleanupError struct {
	Err     error         // why the attempt failed
	Cleanup error         // what the cleanup could not do
	Attempt string        // the attempt whose objects may remain
	Timeout time.Duration // cleanup_timeout of each step
}

func (e *CleanupError) Error() string {
	// One line: errors.Join would put each failure on its own.
	var parts []string
	var flatten func(err error)
	flatten = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, err := range j.Unwrap() {
				flatten(err)
			}
		} else if err != nil {
			parts = append(parts, err.Error())
		}
	}
	flatten(e.Cleanup)
	cleanup := strings.ReplaceAll(strings.Join(parts, "; "), "\n", "; ")
	return fmt.Sprintf("%v; cleanup of attempt %s not finished (each step bounded by cleanup_timeout %v), left to gc: %s",
		e.Err, e.Attempt, e.Timeout, cleanup)
}

func (e *CleanupError) Unwrap() error { return e.Err }

// IsRetryable reports whether a task whose durashuffle call failed with
// err may succeed if the engine runs it again (for a writer: as a new
// attempt, with a new attempt ID). It is true when the store failed in a
// way that passes: it throttled (503 SlowDown, MinIO's SlowDownWrite
// without write quorum) or failed (5xx, resets, timeouts of a request)
// beyond the retries of one request, or it rejected at
// CompleteMultipartUpload a part it had acknowledged (400 InvalidPart:
// MinIO does this after the node the client talks to restarts, see
// docs/operations.md). Such a failure committed nothing.
//
// It is false for a lost commit race (manifest.ErrAlreadyCommitted:
// another attempt's output stands, do not run the task again), for a
// cancelled or expired caller context, and for what a rerun would meet
// again: invalid IDs, input or configuration, a missing stage, corrupt
// data, a refused credential. A cleanup that did not finish (CleanupError)
// does not change the answer: what it left is gc's.
func IsRetryable(err error) bool {
	var ce *CleanupError
	if errors.As(err, &ce) {
		err = ce.Err
	}
	switch {
	case err == nil, errors.Is(err, manifest.ErrAlreadyCommitted), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, store.ErrPartRejected):
		return true
	}
	return store.IsTransient(err)
}
