package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/metrics"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/sidecar"
	"github.com/durashuffle/durashuffle/store"
)

// hangingAbort is a store that does not answer AbortMultipart of keys
// under prefix, whatever the call's context says, until release is
// closed (MinIO without write quorum hangs aborts). Then it carries the
// abort out, as a store that got the request at last would, and answers
// with the context's error: the caller gave up long before.
type hangingAbort struct {
	store.Store
	prefix  string
	entered chan struct{} // closed when the first abort starts hanging
	release chan struct{}
	once    sync.Once
}

func (h *hangingAbort) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if !strings.HasPrefix(key, h.prefix) {
		return h.Store.AbortMultipart(ctx, key, uploadID)
	}
	h.once.Do(func() { close(h.entered) })
	<-h.release
	if err := h.Store.AbortMultipart(context.WithoutCancel(ctx), key, uploadID); err != nil {
		return err
	}
	return ctx.Err()
}

// TestHostileAbortOverrunsWait: a DoPut fails (its commit message counts
// one batch too many) after its multipart upload started, and the store
// hangs the abort. The stream still ends, with its own InvalidArgument,
// AbortWait(cleanup_timeout) after the commit message and while the abort
// hangs; it frees its slot (with max_streams 1, worker 0's DoPut commits
// meanwhile); the abort is logged at ERROR as still running,
// naming the attempt and the wait; the put is counted aborted. Once the
// store answers, the abort finishes in the background, its failure is
// logged naming the attempt, and nothing of the stream is left; worker
// 0's stage seals and reads back; Shutdown then reports the failed
// cleanup (ErrCleanup, 1 stream).
func TestHostileAbortOverrunsWait(t *testing.T) {
	const cleanup = time.Second // the least cleanup_timeout allowed
	wait := sidecar.AbortWait(cleanup)
	forEveryBackend(t, func(t *testing.T, ep testenv.Endpoint) {
		const query = "q-hung"
		hang := &hangingAbort{entered: make(chan struct{}), release: make(chan struct{})}
		e := newEnv(t, ep, envOptions{
			cutOff: true, // the cleanup's Shutdown returns ErrCleanup, as asserted below
			cfg: func(c *durashuffle.Config) {
				c.Write.CleanupTimeout = durashuffle.Duration(cleanup)
				c.Sidecar.MaxStreams = 1
				uploading(c)
			},
			wrap: func(st store.Store) store.Store { hang.Store = st; return hang },
		})
		hang.prefix = e.client.Layout().StagePrefix(query, 0) + "worker-a/"
		var once sync.Once
		free := func() { once.Do(func() { close(hang.release) }) }
		t.Cleanup(free) // before the env's cleanup, which waits for the server

		var bs []putBatch
		for b := range 60 { // ~11 MiB: parts of 5 MiB upload before the end
			rec, _ := genBatch("a", int32(b), 2000, 64)
			bs = append(bs, putBatch{rec, partMD(b % 2)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var sent time.Time
		_, err := doPutCommit(ctx, e.fc, putCmd(query, 0, "a", "hung", 2), testSchema, batches(bs), func(batches, rows int64) []byte {
			waitFor(t, "a part of the failing stream's upload", func() bool { return e.counter.Requests()["UploadPart"] >= 1 })
			sent = time.Now()
			return commitMetadata(batches+1, rows)
		})
		took := time.Since(sent)
		wantCode(t, err, codes.InvalidArgument, "commit message counts 61 batches", "the sidecar received 60 batches", "nothing was committed")
		select {
		case <-hang.entered:
		default:
			t.Fatalf("the abort never reached AbortMultipart (requests %v): the test proves nothing", e.counter.Requests())
		}
		// The server starts its wait after it has the commit message, and
		// the abort hangs until released: the stream cannot end sooner.
		if took < wait || took > wait+10*time.Second {
			t.Errorf("DoPut ended %v after its commit message, want its abort's wait, %v, and little more", took, wait)
		}
		t.Logf("DoPut ended %v after its commit message, its abort hanging (wait %v)", took.Round(time.Millisecond), wait)
		if n := gauge(t, e.m, metrics.SidecarStreams, nil); n != 0 {
			t.Errorf("%v streams hold slots after the DoPut ended", n)
		}

		// The slot is free while the abort still hangs: max_streams is 1.
		want := putRows(t, e, query, "0", 3, 2)
		select {
		case <-hang.release:
			t.Fatal("the abort was released before the next DoPut")
		default:
		}
		logs := e.logs.String()
		for _, s := range []string{
			`level=ERROR msg="abort failed: objects or uploads of this attempt may remain"`,
			fmt.Sprintf("abort of attempt hung still running after %v (2 x cleanup_timeout + 1s); the stream ends without it", wait),
			`level=WARN msg="put aborted, nothing committed" query=q-hung stage=0 worker=a attempt=hung batches=60`,
		} {
			if !strings.Contains(logs, s) {
				t.Errorf("the log does not say %q:\n%s", s, logs)
			}
		}
		if strings.Contains(logs, "abort that overran its wait") {
			t.Errorf("the abort's end is logged while it still hangs:\n%s", logs)
		}
		if n := gauge(t, e.m, metrics.SidecarAbortsTotal, nil); n != 1 {
			t.Errorf("%s = %v, want 1", metrics.SidecarAbortsTotal, n)
		}
		if n := gauge(t, e.m, metrics.SidecarCommitsTotal, nil); n != 1 {
			t.Errorf("%s = %v, want 1 (worker 0)", metrics.SidecarCommitsTotal, n)
		}

		// The store answers: the abort goes on in the background, its
		// failure (the answer came after its deadline) is logged, and it
		// leaves nothing.
		free()
		waitFor(t, "the overrun abort's end in the log", func() bool {
			return strings.Contains(e.logs.String(), `level=ERROR msg="abort that overran its wait failed" query=q-hung stage=0 worker=a attempt=hung`)
		})
		t.Logf("the abort's end: %s", lineWith(e.logs.String(), "abort that overran its wait failed"))
		e.nothingLeft(query, 0, "a")
		if err := doAction(ctx, e.fc, flightclient.ActionSealStage, map[string]any{"query": query, "stage": 0, "workers": 1}, nil); err != nil {
			t.Fatalf("seal of worker 0: %v", err)
		}
		readsBack(t, e, query, want)

		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		err = e.srv.Shutdown(sctx)
		if !errors.Is(err, sidecar.ErrCleanup) || errors.Is(err, sidecar.ErrCutOff) || !strings.Contains(err.Error(), "1 streams") {
			t.Fatalf("Shutdown: %v, want ErrCleanup naming 1 stream and nothing cut off", err)
		}
	})
}

// lineWith is the first line of logs that contains s.
func lineWith(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
