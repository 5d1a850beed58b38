// Package retry wraps a store.Store with durashuffle's one retry layer:
// jittered exponential backoff on retryable errors, never on a cancelled
// context or a 4xx that would fail again. Ranged reads whose body breaks
// part-way resume from the byte where they stopped.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/durashuffle/durashuffle/store"
)

// Policy says how often and how patiently to retry.
type Policy struct {
	MaxAttempts int           // attempts per request, the first included
	BaseDelay   time.Duration // first backoff, doubled per attempt
	MaxDelay    time.Duration // cap of one backoff
	Timeout     time.Duration // deadline of one attempt (0: none)
	// OnRetry, if set, hears of every retry before its backoff (the upload
	// pool lowers its concurrency on throttling answers).
	OnRetry func(op, reason string)
}

// Throttling reports whether a retry reason is the store asking the
// client to slow down. MinIO says SlowDownWrite and SlowDownRead (503)
// when it lacks quorum or is overloaded.
func Throttling(reason string) bool {
	return reason == "HTTP503" || reason == "HTTP429" || store.IsThrottlingCode(reason)
}

// Backoff returns the delay before retry number n (1-based): full jitter
// over an exponentially growing window, capped.
func (p Policy) Backoff(n int) time.Duration {
	window := p.window(n)
	if window <= 0 {
		return 0
	}
	return window/2 + rand.N(window/2+1)
}

// window is the longest backoff before retry number n.
func (p Policy) window(n int) time.Duration {
	if p.BaseDelay <= 0 {
		return 0
	}
	window := p.BaseDelay << min(n-1, 30)
	if p.MaxDelay > 0 && (window > p.MaxDelay || window <= 0) {
		window = p.MaxDelay
	}
	return window
}

// MaxBackoffs is the longest the backoffs of one request can add up to
// when every attempt fails: the full window of each of the
// MaxAttempts-1 retries. A request that fails for good takes at most
// this plus MaxAttempts times the longest an attempt can take.
func (p Policy) MaxBackoffs() time.Duration {
	var total time.Duration
	for n := 1; n < p.MaxAttempts; n++ {
		total += p.window(n)
	}
	return total
}

// Store is a store.Store whose calls retry under a Policy.
type Store struct {
	inner   store.Store
	policy  Policy
	counter *store.Counter
}

// Wrap returns s with retries. counter, if non-nil, records each retry.
func Wrap(s store.Store, p Policy, counter *store.Counter) *Store {
	if p.MaxAttempts < 1 {
		p.MaxAttempts = 1
	}
	return &Store{inner: s, policy: p, counter: counter}
}

// Reason names the class of a retryable error for metrics and summaries.
func Reason(err error) string {
	var se *store.Error
	if errors.As(err, &se) && (se.Status < 200 || se.Status > 299) {
		if se.Code != "" {
			return se.Code
		}
		if se.Status != 0 {
			return fmt.Sprintf("HTTP%d", se.Status)
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused" // the server is down or restarting
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "truncated"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}

type attemptsKey struct{}

// attemptKey marks the context of every attempt the retry layer makes.
type attemptKey struct{}

// InAttempt reports whether ctx is the context of an attempt of the retry
// layer: every call it makes to the store below carries one, and so does
// every HTTP request that call sends. A test store (or transport) that
// finds a call without it has found a request sent around the layer.
func InAttempt(ctx context.Context) bool {
	on, _ := ctx.Value(attemptKey{}).(bool)
	return on
}

// CountAttempts returns a context under which the retry layer adds one to
// *n for every attempt it makes. A caller that sees more than one attempt
// of a non-idempotent request (CreateMultipartUpload) knows an earlier
// try may have succeeded unseen.
func CountAttempts(ctx context.Context, n *atomic.Int32) context.Context {
	return context.WithValue(ctx, attemptsKey{}, n)
}

// do runs fn until it succeeds, fails permanently, or runs out of attempts.
func (s *Store) do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	var err, prev error
	start := time.Now()
	// cut is the error once the caller's context has ended: the last
	// attempt's, and the one before it in words, since an attempt cut
	// short by the caller says only that it was cancelled, while the
	// previous one says why the store did not answer (a connect timeout).
	cut := func(attempt int) error {
		took := time.Since(start).Round(time.Millisecond)
		switch {
		case prev != nil:
			err = fmt.Errorf("%s: stopped by the caller in attempt %d after %v (attempt %d: %v): %w", op, attempt, took, attempt-1, prev, err)
		case attempt > 1:
			err = fmt.Errorf("%s: stopped by the caller after %d attempts in %v: %w", op, attempt, took, err)
		}
		return errors.Join(err, context.Cause(ctx))
	}
	counted, _ := ctx.Value(attemptsKey{}).(*atomic.Int32)
	for attempt := 1; ; attempt++ {
		if counted != nil {
			counted.Add(1)
		}
		actx, cancel := context.WithValue(ctx, attemptKey{}, true), context.CancelFunc(func() {})
		if s.policy.Timeout > 0 {
			actx, cancel = context.WithTimeout(actx, s.policy.Timeout)
		}
		err = fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return cut(attempt)
		}
		// An attempt that hit its own deadline is a stall: retryable.
		stalled := s.policy.Timeout > 0 && errors.Is(err, context.DeadlineExceeded)
		if !stalled && !store.IsTransient(err) {
			return err
		}
		if attempt >= s.policy.MaxAttempts {
			if stalled {
				// The store never answered the last attempt: a passing
				// failure, not the caller's deadline (which is checked
				// above), so the chain must not say DeadlineExceeded.
				err = &store.Error{Op: op, Code: "RequestTimeout", Retryable: true,
					Err: fmt.Errorf("no answer within request_timeout %v: %v", s.policy.Timeout, err)}
			}
			return fmt.Errorf("%s: gave up after %d attempts in %v: %w", op, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		reason := Reason(err)
		if stalled {
			reason = "timeout"
		}
		if s.counter != nil {
			s.counter.Retry(op, reason)
		}
		if s.policy.OnRetry != nil {
			s.policy.OnRetry(op, reason)
		}
		t := time.NewTimer(s.policy.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			prev = nil // err is an answer: nothing was cut short
			return cut(attempt)
		case <-t.C:
		}
		prev = err
	}
}

// Put implements store.Writer.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts store.PutOptions) error {
	return s.do(ctx, "PutObject", func(ctx context.Context) error { return s.inner.Put(ctx, key, body, opts) })
}

// CreateMultipart implements store.Writer.
func (s *Store) CreateMultipart(ctx context.Context, key string) (id string, err error) {
	err = s.do(ctx, "CreateMultipartUpload", func(ctx context.Context) (err error) {
		id, err = s.inner.CreateMultipart(ctx, key)
		return err
	})
	return id, err
}

// UploadPart implements store.Writer. Every attempt reads the body
// again from its first byte: from memory, from disk, or from a stream's
// reader made anew.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body store.Body) (pt store.Part, err error) {
	err = s.do(ctx, "UploadPart", func(ctx context.Context) (err error) {
		pt, err = s.inner.UploadPart(ctx, key, uploadID, n, body)
		return err
	})
	return pt, err
}

// Unwrap implements store.Unwrapper.
func (s *Store) Unwrap() store.Store { return s.inner }

// StreamsParts implements store.PartStreamer: true when the store below
// streams parts.
func (s *Store) StreamsParts() bool { return store.StreamsParts(s.inner) }

// CompleteMultipart implements store.Writer.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) error {
	return s.do(ctx, "CompleteMultipartUpload", func(ctx context.Context) error {
		return s.inner.CompleteMultipart(ctx, key, uploadID, parts)
	})
}

// AbortMultipart implements store.Writer.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	return s.do(ctx, "AbortMultipartUpload", func(ctx context.Context) error {
		return s.inner.AbortMultipart(ctx, key, uploadID)
	})
}

// EnsureBucket implements store.BucketMaker: the store below's
// EnsureBucket (HeadBucket, then CreateBucket if missing), retried as a
// whole, which it may be: it is idempotent. A store below that cannot
// create buckets is an error wrapping errors.ErrUnsupported.
func (s *Store) EnsureBucket(ctx context.Context) error {
	b, ok := store.As[store.BucketMaker](s.inner)
	if !ok {
		return fmt.Errorf("the store (%T) cannot create buckets: %w", s.inner, errors.ErrUnsupported)
	}
	return s.do(ctx, "CreateBucket", b.EnsureBucket)
}

// List implements store.Lister.
func (s *Store) List(ctx context.Context, prefix, delim string) (objs []store.ObjectInfo, prefixes []string, err error) {
	err = s.do(ctx, "ListObjectsV2", func(ctx context.Context) (err error) {
		objs, prefixes, err = s.inner.List(ctx, prefix, delim)
		return err
	})
	return objs, prefixes, err
}

// ListUploads implements store.Lister.
func (s *Store) ListUploads(ctx context.Context, prefix string) (ups []store.UploadInfo, err error) {
	err = s.do(ctx, "ListMultipartUploads", func(ctx context.Context) (err error) {
		ups, err = s.inner.ListUploads(ctx, prefix)
		return err
	})
	return ups, err
}

// Delete implements store.Deleter.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	return s.do(ctx, "DeleteObjects", func(ctx context.Context) error { return s.inner.Delete(ctx, keys...) })
}

// GetRange implements store.Reader. The returned body resumes a broken
// transfer with a narrower range from the first byte not yet delivered,
// within the same attempt budget.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	r := &resumer{s: s, ctx: ctx, key: key, off: off, left: length}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

type resumer struct {
	s        *Store
	ctx      context.Context
	key      string
	off      int64 // next byte to deliver
	left     int64 // bytes still to deliver; < 0 means to the end
	body     io.ReadCloser
	cancel   context.CancelFunc
	attempts int
}

func (r *resumer) open() error {
	return r.s.do(r.ctx, "GetObject", func(_ context.Context) error {
		r.attempts++
		// The attempt context must outlive this call: the body is read
		// after it returns. It is cancelled when the body is closed.
		marked := context.WithValue(r.ctx, attemptKey{}, true)
		actx, cancel := context.WithCancel(marked)
		if r.s.policy.Timeout > 0 {
			actx, cancel = context.WithTimeout(marked, r.s.policy.Timeout)
		}
		body, err := r.s.inner.GetRange(actx, r.key, r.off, r.left)
		if err != nil {
			cancel()
			return err
		}
		r.body, r.cancel = body, cancel
		return nil
	})
}

func (r *resumer) closeBody() {
	if r.body != nil {
		r.body.Close()
		r.cancel()
		r.body = nil
	}
}

func (r *resumer) Read(p []byte) (int, error) {
	for {
		if r.left == 0 {
			return 0, io.EOF
		}
		if r.left > 0 && int64(len(p)) > r.left {
			p = p[:r.left]
		}
		n, err := r.body.Read(p)
		r.off += int64(n)
		if r.left > 0 {
			r.left -= int64(n)
		}
		switch {
		case err == nil:
			return n, nil
		case err == io.EOF && r.left <= 0:
			return n, io.EOF
		case err == io.EOF:
			err = io.ErrUnexpectedEOF // the server ended the body short
		}
		// The body broke part-way: resume from r.off if attempts remain.
		if r.ctx.Err() != nil || !resumable(err) || r.attempts >= r.s.policy.MaxAttempts {
			if n > 0 {
				return n, nil // deliver what arrived; the error repeats on the next Read
			}
			return 0, fmt.Errorf("GetObject %s: body broke at byte %d after %d attempts: %w", r.key, r.off, r.attempts, err)
		}
		if r.s.counter != nil {
			r.s.counter.Retry("GetObject", Reason(err))
		}
		r.closeBody()
		if oerr := r.open(); oerr != nil {
			if r.left > 0 && errors.Is(oerr, store.ErrInvalidRange) {
				// The range ran past the object's end, and the first body
				// ended at it: a range cut short, as S3 answers it, not a
				// break. (A resumed range starts where the object ended.)
				r.left = 0
				return n, io.EOF
			}
			return n, oerr
		}
		if n > 0 {
			return n, nil
		}
	}
}

func resumable(err error) bool {
	var ne net.Error
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) || store.IsTransient(err)
}

func (r *resumer) Close() error {
	r.closeBody()
	return nil
}
