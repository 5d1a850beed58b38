package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/gc"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

func TestIsRetryable(t *testing.T) {
	slow := &store.Error{Op: "UploadPart", Key: "k", Status: 503, Code: "SlowDownWrite", Retryable: true}
	rejected := &store.Error{Op: "CompleteMultipartUpload", Key: "k", Status: 400, Code: "InvalidPart",
		Err: fmt.Errorf("%w: one or more parts could not be found", store.ErrPartRejected)}
	denied := &store.Error{Op: "PutObject", Key: "k", Status: 403, Code: "AccessDenied"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"throttled beyond the retries", fmt.Errorf("upload part 3 of k: UploadPart: gave up after 8 attempts: %w", slow), true},
		{"part rejected at complete (MinIO after a restart)", fmt.Errorf("complete multipart upload k: %w", rejected), true},
		{"rejected part, cleanup unfinished", &durashuffle.CleanupError{Err: rejected, Cleanup: context.DeadlineExceeded, Attempt: "a"}, true},
		{"throttled, cleanup timed out", &durashuffle.CleanupError{Err: slow, Cleanup: fmt.Errorf("delete: %w", context.DeadlineExceeded)}, true},
		{"lost commit race", fmt.Errorf("commit: %w", manifest.ErrAlreadyCommitted), false},
		{"access denied", denied, false},
		{"caller cancelled", errors.Join(slow, context.Canceled), false},
		{"invalid configuration", fmt.Errorf("%w: chunk_size", durashuffle.ErrInvalidConfig), false},
		{"invalid ID", manifest.ValidateID("query", "../x"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := durashuffle.IsRetryable(c.err); got != c.want {
				t.Errorf("IsRetryable(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// etagStore hands back a wrong ETag for one part, so the server's
// CompleteMultipartUpload answers 400 InvalidPart: what MinIO answers when
// the node the client talks to restarts and its quorum tie-break drops
// parts it had acknowledged. The server is real; only the ETag lies.
type etagStore struct {
	store.Store
	part int32
}

func (s *etagStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	pt, err := s.Store.UploadPart(ctx, key, id, n, body)
	if err == nil && n == s.part {
		pt.ETag = `"00000000000000000000000000000000"`
	}
	return pt, err
}

// TestRejectedPartIsRetryableForTheTask: a Complete refused with 400
// InvalidPart is not retried as a request (it would fail again), the
// writer aborts and leaves nothing, and the error tells the engine that
// running the task again may succeed; the rerun commits.
func TestRejectedPartIsRetryableForTheTask(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		c := testenv.Client(t, cfg, durashuffle.WithStore(&etagStore{Store: st, part: 2}), durashuffle.WithCounter(counter))
		defer c.Close()
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Attempt: "first", Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeRows(w, 12_000, 4); err != nil { // ~12 MiB: 3 parts of 5 MiB
			t.Fatal(err)
		}
		_, err = w.Commit(ctx)
		if err == nil {
			t.Fatal("commit succeeded with a part the server does not have")
		}
		t.Logf("commit: %v", err)
		if !durashuffle.IsRetryable(err) || !errors.Is(err, store.ErrPartRejected) || !strings.Contains(err.Error(), "InvalidPart") {
			t.Fatalf("commit error %v: want a retryable-for-the-task InvalidPart", err)
		}
		if n := counter.Requests()["CompleteMultipartUpload"]; n != 1 {
			t.Errorf("CompleteMultipartUpload sent %d times, want 1 (InvalidPart fails again)", n)
		}
		if ups, _ := st.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left open: %v", ups)
		}
		if objs, _, _ := st.List(ctx, "", ""); len(objs) != 0 {
			t.Fatalf("objects left: %v", objs)
		}
		if _, err := c.OpenStage(ctx, "q", 0); !errors.Is(err, manifest.ErrStageNotFound) {
			t.Fatalf("open the stage of the failed attempt: %v, want stage not found", err)
		}

		// What the engine does with a retryable error: the task again, as
		// a new attempt.
		good := testenv.Client(t, cfg, durashuffle.WithStore(st))
		defer good.Close()
		w, err = good.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Attempt: "rerun", Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeRows(w, 12_000, 4); err != nil {
			t.Fatal(err)
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatalf("rerun: %v", err)
		}
		if got := m.Sum().Rows; got != 12_000 {
			t.Fatalf("rerun committed %d rows, want 12000", got)
		}
	})
}

// hangStore makes AbortMultipartUpload and DeleteObjects wait until their
// context ends, as MinIO does without write quorum, and fails parts from
// number 2 on with a permanent error.
type hangStore struct {
	store.Store
}

func (s hangStore) UploadPart(ctx context.Context, key, id string, n int32, body store.Body) (store.Part, error) {
	if n >= 2 {
		return store.Part{}, &store.Error{Op: "UploadPart", Key: key, Status: 403, Code: "AccessDenied", Err: errors.New("injected")}
	}
	return s.Store.UploadPart(ctx, key, id, n, body)
}

func (s hangStore) AbortMultipart(ctx context.Context, key, id string) error {
	<-ctx.Done()
	return &store.Error{Op: "AbortMultipartUpload", Key: key, Err: ctx.Err()}
}

func (s hangStore) Delete(ctx context.Context, keys ...string) error {
	if len(keys) == 1 && strings.Contains(keys[0], "/~commit-guard/") {
		return s.Store.Delete(ctx, keys...) // the commit guard's probe, before any part
	}
	<-ctx.Done()
	return &store.Error{Op: "DeleteObjects", Err: ctx.Err()}
}

// TestCleanupIsBounded: a writer whose store hangs the cleanup fails
// within about twice cleanup_timeout (abort, then delete), says that
// the rest is left to gc, and gc then removes it.
func TestCleanupIsBounded(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		cfg.Write.CleanupTimeout = durashuffle.Duration(time.Second)
		c := testenv.Client(t, cfg, durashuffle.WithStore(hangStore{st}), durashuffle.WithCounter(counter))
		defer c.Close()
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Attempt: "hung", Partitions: 2})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		werr := writeRows(w, 12_000, 2)
		_, err = w.Commit(ctx)
		took := time.Since(start)
		if werr == nil && err == nil {
			t.Fatal("commit succeeded")
		}
		t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
		var ce *durashuffle.CleanupError
		if !errors.As(err, &ce) || ce.Attempt != "hung" || !strings.Contains(err.Error(), "left to gc") ||
			!strings.Contains(err.Error(), "AccessDenied") || !strings.Contains(err.Error(), "delete 1 objects of attempt hung") {
			t.Fatalf("commit error %v: want a CleanupError naming the cause and gc", err)
		}
		if durashuffle.IsRetryable(err) {
			t.Errorf("IsRetryable of an AccessDenied with an unfinished cleanup = true")
		}
		if took > 2*time.Second+10*time.Second {
			t.Errorf("failure took %v with cleanup_timeout 1s", took)
		}
		// Nothing visible; what is left, gc removes.
		if _, err := c.OpenStage(ctx, "q", 0); !errors.Is(err, manifest.ErrStageNotFound) {
			t.Fatalf("open the stage: %v, want stage not found", err)
		}
		ups, _ := st.ListUploads(ctx, "")
		if len(ups) != 1 {
			t.Fatalf("%d uploads open after the hung abort, want the writer's 1", len(ups))
		}
		rep, err := gc.Run(ctx, st, c.Layout(), gc.Options{})
		if err != nil {
			t.Fatalf("gc: %v", err)
		}
		if rep.Totals.UploadsAborted != 1 {
			t.Errorf("gc aborted %d uploads, want 1", rep.Totals.UploadsAborted)
		}
		if ups, _ := st.ListUploads(ctx, ""); len(ups) != 0 {
			t.Fatalf("uploads left after gc: %v", ups)
		}
		if objs, _, _ := st.List(ctx, "", ""); len(objs) != 0 {
			t.Fatalf("objects left after gc: %v", objs)
		}
	})
}
