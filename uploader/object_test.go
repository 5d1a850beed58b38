package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle/internal/retry"
	"github.com/durashuffle/durashuffle/store"
)

// scripted is a store whose answers a test scripts: it records every call
// and keeps what a real store would (uploads, their parts, objects), so an
// Upload's state machine can be driven through its cases without a server.
type scripted struct {
	store.Store // unused methods
	mu          sync.Mutex
	calls       []string
	uploads     map[string]string // upload ID -> key
	objects     map[string]int64  // key -> size
	next        int
	// hooks: a non-nil error is returned instead of the real answer
	// (after the call's effect when effect is true).
	createErr   []error // per CreateMultipart call, in order; effect: the upload exists
	partErr     func(n int32) error
	completeErr error // effect: the object exists (an answer lost)
	noEffect    bool  // with completeErr: the Complete did nothing
	abortErr    error // every AbortMultipart fails with it, doing nothing
	completed   [][]store.Part
}

func newScripted() *scripted {
	return &scripted{uploads: map[string]string{}, objects: map[string]int64{}}
}

func (s *scripted) record(format string, args ...any) {
	s.mu.Lock()
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *scripted) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (s *scripted) Put(ctx context.Context, key string, body []byte, o store.PutOptions) error {
	s.record("Put %s %d", key, len(body))
	s.mu.Lock()
	s.objects[key] = int64(len(body))
	s.mu.Unlock()
	return nil
}

func (s *scripted) CreateMultipart(ctx context.Context, key string) (string, error) {
	s.mu.Lock()
	s.next++
	id := fmt.Sprintf("u%d", s.next)
	s.uploads[id] = key
	var err error
	if len(s.createErr) > 0 {
		err, s.createErr = s.createErr[0], s.createErr[1:]
	}
	s.mu.Unlock()
	s.record("Create %s %s", key, id)
	return id, err
}

func (s *scripted) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	s.record("UploadPart %s %d", id, n)
	if s.partErr != nil {
		if err := s.partErr(n); err != nil {
			return store.Part{}, err
		}
	}
	pt := store.Part{Number: n, ETag: fmt.Sprintf("etag-%d", n), Size: body.Size()}
	if sum, ok := body.CRC32C(); ok {
		pt.CRC32C = &sum
	}
	return pt, nil
}

func (s *scripted) CompleteMultipart(ctx context.Context, key, id string, parts []store.Part) error {
	s.record("Complete %s %d", id, len(parts))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completed = append(s.completed, slices.Clone(parts))
	if s.noEffect {
		return s.completeErr
	}
	var size int64
	for _, p := range parts {
		size += p.Size
	}
	delete(s.uploads, id)
	s.objects[key] = size
	return s.completeErr
}

func (s *scripted) AbortMultipart(ctx context.Context, key, id string) error {
	s.record("Abort %s", id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abortErr != nil {
		return s.abortErr
	}
	delete(s.uploads, id)
	return nil
}

func (s *scripted) List(ctx context.Context, prefix, delim string) ([]store.ObjectInfo, []string, error) {
	s.record("List %s", prefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.ObjectInfo
	for k, n := range s.objects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, store.ObjectInfo{Key: k, Size: n})
		}
	}
	return out, nil, nil
}

func (s *scripted) ListUploads(ctx context.Context, prefix string) ([]store.UploadInfo, error) {
	s.record("ListUploads %s", prefix)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.UploadInfo
	for id, k := range s.uploads {
		if strings.HasPrefix(k, prefix) {
			out = append(out, store.UploadInfo{Key: k, UploadID: id})
		}
	}
	return out, nil
}

const testChunk = 1 << 10

// write hands an object n chunks of testChunk bytes (the last one half).
func write(t *testing.T, p *Pool, o *Upload, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		buf, err := p.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		size := testChunk
		if i == n {
			size = testChunk / 2
		}
		buf = append(buf, make([]byte, size)...)
		if err := o.submit(int32(i), buf, i == n); err != nil {
			t.Fatalf("submit part %d: %v", i, err)
		}
	}
}

func newTestPool(st Store) *Pool {
	return New(st, Config{ChunkSize: testChunk, Concurrency: 2, MaxBuffered: 4, Checksum: true, CleanupTimeout: time.Second}, nil)
}

// TestObjectStates drives an Upload through each path of its state
// machine against a scripted store and checks the requests it made.
func TestObjectStates(t *testing.T) {
	permanent := &store.Error{Op: "UploadPart", Status: 403, Code: "AccessDenied"}
	slow := &store.Error{Op: "CreateMultipartUpload", Status: 503, Code: "SlowDown", Retryable: true}

	t.Run("one chunk is a single put", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		write(t, p, o, 1)
		res, err := o.Finish(context.Background())
		if err != nil || res.Parts != 1 || res.Size != testChunk/2 {
			t.Fatalf("Finish = %+v, %v", res, err)
		}
		if st.count("Put k") != 1 || st.count("Create") != 0 || st.count("UploadPart") != 0 {
			t.Fatalf("calls %v: want one Put and no multipart upload", st.calls)
		}
	})

	t.Run("the upload is created once, lazily, and completed in part order", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		if st.count("Create") != 0 {
			t.Fatal("an upload was created before any chunk")
		}
		write(t, p, o, 5)
		res, err := o.Finish(context.Background())
		if err != nil || res.Parts != 5 || res.Size != 4*testChunk+testChunk/2 {
			t.Fatalf("Finish = %+v, %v", res, err)
		}
		if st.count("Create") != 1 || st.count("UploadPart") != 5 || st.count("Complete") != 1 || st.count("Abort") != 0 {
			t.Fatalf("calls %v", st.calls)
		}
		for i, pt := range st.completed[0] {
			if pt.Number != int32(i+1) || pt.ETag != fmt.Sprintf("etag-%d", i+1) || pt.CRC32C == nil {
				t.Fatalf("Complete part %d: %+v", i, pt)
			}
		}
	})

	t.Run("a failed abort after a failed part is the next Abort's to report", func(t *testing.T) {
		st := newScripted()
		st.partErr = func(n int32) error {
			if n == 4 { // the last: no submit comes after it
				return permanent
			}
			return nil
		}
		hang := errors.New("abort hung")
		st.abortErr = hang
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", func(error) {})
		write(t, p, o, 4)
		_, err := o.Finish(context.Background())
		// Why the object failed, alone: the caller decides on it (a
		// retryable part failure must not read as a deadline).
		if !errors.Is(err, permanent) || errors.Is(err, hang) {
			t.Fatalf("Finish: %v, want the part failure without the abort's", err)
		}
		if err := o.Abort(); !errors.Is(err, hang) {
			t.Fatalf("Abort after Finish: %v, want the failed abort", err)
		}
		if err := o.Abort(); err != nil {
			t.Fatalf("a second Abort: %v, want nil (reported once)", err)
		}
		if len(st.uploads) != 1 {
			t.Fatalf("uploads %v: the failed abort left the upload to gc, want it listed", st.uploads)
		}
	})
	t.Run("a failed part fails the object once, and the upload is aborted", func(t *testing.T) {
		st := newScripted()
		st.partErr = func(n int32) error {
			if n == 4 { // the last: no submit comes after it
				return permanent
			}
			return nil
		}
		p := newTestPool(st)
		defer p.Close()
		var fails []error
		var mu sync.Mutex
		o := p.newUpload(context.Background(), "k", func(err error) { mu.Lock(); fails = append(fails, err); mu.Unlock() })
		write(t, p, o, 4)
		_, err := o.Finish(context.Background())
		if !errors.Is(err, permanent) || !strings.Contains(err.Error(), "upload part 4 of k") {
			t.Fatalf("Finish: %v, want the part 4 failure", err)
		}
		if len(fails) != 1 || !errors.Is(fails[0], permanent) {
			t.Fatalf("onFail called %d times: %v", len(fails), fails)
		}
		if st.count("Complete") != 0 || st.count("Abort u1") != 1 || len(st.uploads) != 0 {
			t.Fatalf("calls %v, uploads left %v", st.calls, st.uploads)
		}
		// A later submit returns the failure and spends no request.
		buf, _ := p.acquire(context.Background())
		before := st.count("UploadPart")
		if err := o.submit(9, append(buf, 1), false); !errors.Is(err, permanent) || st.count("UploadPart") != before {
			t.Fatalf("submit after the failure: %v", err)
		}
	})

	t.Run("a Complete whose answer was lost counts when the object is whole", func(t *testing.T) {
		st := newScripted()
		st.completeErr = &store.Error{Op: "CompleteMultipartUpload", Status: 404, Code: "NoSuchUpload", Err: store.ErrNotFound}
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		write(t, p, o, 3)
		res, err := o.Finish(context.Background())
		if err != nil || res.Parts != 3 {
			t.Fatalf("Finish = %+v, %v", res, err)
		}
		if st.count("List k") != 1 || st.count("Abort") != 0 {
			t.Fatalf("calls %v: want the listing that settles it, and no abort", st.calls)
		}
	})

	t.Run("a lost Complete with the object not whole fails and aborts", func(t *testing.T) {
		st := newScripted()
		st.completeErr = &store.Error{Op: "CompleteMultipartUpload", Status: 404, Code: "NoSuchUpload", Err: store.ErrNotFound}
		st.noEffect = true
		st.objects["k"] = 7 // an object of another size: not this upload's
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		write(t, p, o, 3)
		_, err := o.Finish(context.Background())
		if !store.IsNotFound(err) || !strings.Contains(err.Error(), "complete multipart upload k (3 parts") {
			t.Fatalf("Finish: %v, want the Complete's failure", err)
		}
		if st.count("List k") != 1 || st.count("Abort u1") != 1 {
			t.Fatalf("calls %v: want the listing, then the abort", st.calls)
		}
	})

	t.Run("a retried create aborts the stray upload it may have left", func(t *testing.T) {
		st := newScripted()
		st.createErr = []error{slow} // the first create happens, its answer is a 503
		rs := retry.Wrap(st, retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, nil)
		p := newTestPool(rs)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		write(t, p, o, 2)
		if _, err := o.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st.count("Create") != 2 || st.count("ListUploads k") != 1 || st.count("Abort u1") != 1 || st.count("Abort u2") != 0 || len(st.uploads) != 0 {
			t.Fatalf("calls %v, uploads left %v: want the stray u1 aborted and u2 completed", st.calls, st.uploads)
		}
	})

	t.Run("a create cut off once by cancellation aborts the upload it may have made", func(t *testing.T) {
		st := newScripted()
		st.createErr = []error{context.Canceled} // the create happened; its answer never came
		p := newTestPool(st)
		defer p.Close()
		o := p.newUpload(context.Background(), "k", nil)
		write(t, p, o, 2)
		if _, err := o.Finish(context.Background()); err == nil {
			t.Fatal("Finish of an object whose create failed: nil error")
		}
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
		if st.count("Create") != 1 || st.count("ListUploads k") != 1 || st.count("Abort u1") != 1 || len(st.uploads) != 0 {
			t.Fatalf("calls %v, uploads left %v: want the upload the failed create made aborted", st.calls, st.uploads)
		}
	})

	t.Run("Abort after parts aborts the upload on a detached context", func(t *testing.T) {
		st := newScripted()
		p := newTestPool(st)
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background())
		o := p.newUpload(ctx, "k", nil)
		buf, _ := p.acquire(ctx)
		if err := o.submit(1, append(buf, make([]byte, testChunk)...), false); err != nil {
			t.Fatal(err)
		}
		o.wg.Wait()
		cancel()
		if err := o.Abort(); err != nil {
			t.Fatal(err)
		}
		if st.count("Abort u1") != 1 || len(st.uploads) != 0 {
			t.Fatalf("calls %v, uploads left %v", st.calls, st.uploads)
		}
	})
}
