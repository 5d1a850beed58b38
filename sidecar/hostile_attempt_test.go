package sidecar_test

import (
	"bytes"
	"context"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/sidecar"
)

// attemptBatches is worker 4's output under attempt "fixed": n batches of
// worker name w (its rows say who wrote them), batch b to partition b%2,
// and the rows of each partition in the order DoGet returns them.
func attemptBatches(w string, n int) ([]putBatch, [][]row) {
	var bs []putBatch
	want := make([][]row, 2)
	for b := range n {
		rec, rows := genBatch(w, int32(b), 300, 64)
		bs = append(bs, putBatch{rec, partMD(b % 2)})
		want[b%2] = append(want[b%2], rows...)
	}
	return bs, want
}

// attemptPut sends worker 4's output under attempt "fixed" of query q:
// n batches of worker name w.
func attemptPut(ctx context.Context, e *env, q, w string, n int) (flightclient.PutResult, [][]row, error) {
	bs, want := attemptBatches(w, n)
	res, err := doPut(ctx, e.fc, putCmd(q, 0, 4, "fixed", 2), testSchema, batches(bs))
	return res, want, err
}

// storedBytes reads every object under worker 4's folder of q (its
// manifest and data objects), by key.
func storedBytes(t *testing.T, e *env, q string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	l := e.client.Layout()
	objs, _, err := e.raw.List(ctx, l.StagePrefix(q, 0)+"worker-4/", "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, o := range objs {
		r, err := e.raw.GetRange(ctx, o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("read %s: %v", o.Key, err)
		}
		if int64(len(b)) != o.Size {
			t.Fatalf("read %d bytes of %s, listed %d", len(b), o.Key, o.Size)
		}
		out[o.Key] = b
	}
	return out
}

// sameBytes fails the test unless after holds the keys of before, each
// with the same bytes.
func sameBytes(t *testing.T, what string, before, after map[string][]byte) {
	t.Helper()
	if !maps.EqualFunc(before, after, bytes.Equal) {
		t.Fatalf("%s: stored %v, before %v", what, sizes(after), sizes(before))
	}
}

// sizes is a map of stored bytes by key, as sizes, for messages.
func sizes(m map[string][]byte) map[string]int {
	out := map[string]int{}
	for k, b := range m {
		out[k] = len(b)
	}
	return out
}

// readWorker4 reads both partitions of q back with one DoGet, in the
// order it returns them.
func readWorker4(t *testing.T, e *env, q string) []row {
	t.Helper()
	_, got, err := doGet(context.Background(), e.fc, map[string]any{"query": q, "stage": 0, "partitions": []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestHostileReusedAttempt: a second DoPut for a worker and attempt that
// committed fails AlreadyExists naming both, and the first output stays
// byte for byte: every object under the worker (its manifest and data)
// holds the same bytes, DoGet returns the same rows, value for value and
// in the same order, and no upload is open. A repeat of the same content
// is told it committed, and changes no byte either.
func TestHostileReusedAttempt(t *testing.T) {
	forEveryStore(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		first, want, err := attemptPut(ctx, e, "reused", "first", 6)
		if err != nil || !first.Committed {
			t.Fatalf("first put: %+v %v", first, err)
		}
		stored := storedBytes(t, e, "reused")
		if len(stored) < 2 {
			t.Fatalf("the first put stored %v: want its manifest and data", sizes(stored))
		}
		read := readWorker4(t, e, "reused")
		if w := slices.Concat(want...); !slices.Equal(read, w) {
			t.Fatalf("read back %d rows, want the first put's %d: %s", len(read), len(w), firstDiff(read, w))
		}

		_, _, err = attemptPut(ctx, e, "reused", "second", 3)
		wantCode(t, err, codes.AlreadyExists, "worker 4 of reused stage 0", "attempt fixed is already committed", "unchanged")
		sameBytes(t, "after the second put", stored, storedBytes(t, e, "reused"))
		if got := readWorker4(t, e, "reused"); !slices.Equal(got, read) {
			t.Fatalf("after the second put: read back %d rows, before %d: %s", len(got), len(read), firstDiff(got, read))
		}

		again, _, err := attemptPut(ctx, e, "reused", "first", 6)
		if err != nil || !again.Committed || again.Rows != first.Rows || again.BytesStored != first.BytesStored {
			t.Fatalf("repeat of the same content: %+v %v, want committed as %+v", again, err, first)
		}
		sameBytes(t, "after the repeat", stored, storedBytes(t, e, "reused"))
		if ups, err := e.raw.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left open: %v %v", ups, err)
		}
		// The sidecar serves on.
		if got := readWorker4(t, e, "reused"); !slices.Equal(got, read) {
			t.Fatalf("after the repeat: read back %d rows, before %d: %s", len(got), len(read), firstDiff(got, read))
		}
	})
}

// TestHostileConcurrentAttempt: two DoPuts with the same worker and
// attempt and different content race to commit. Both send their batches;
// once the sidecar has read all of them (its DoPut.batch hook counts
// them) both commit messages go at once, so the two commits run
// together. Exactly one commits; the other fails AlreadyExists naming the
// worker and the attempt; the stage reads back the winner's rows, row for
// row, from its objects alone (the loser's are deleted); no upload is
// open; and the next DoPut, of another worker, commits.
func TestHostileConcurrentAttempt(t *testing.T) {
	forEveryStore(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		const perStream = 8
		var read atomic.Int64 // batches the sidecar has read, of both streams
		restore := sidecar.SetTestHook(func(point string) {
			if point == "DoPut.batch" {
				read.Add(1)
			}
		})
		defer restore()

		names := [2]string{"alpha", "bravo"}
		var (
			wg    sync.WaitGroup
			ready sync.WaitGroup // both streams sent their batches
			start = make(chan struct{})
			res   [2]flightclient.PutResult
			want  [2][][]row
			errs  [2]error
		)
		ready.Add(2)
		for i, name := range names {
			bs, w := attemptBatches(name, perStream)
			want[i] = w
			wg.Go(func() {
				res[i], errs[i] = doPutCommit(ctx, e.fc, putCmd("twin", 0, 4, "fixed", 2), testSchema, batches(bs), func(batches, rows int64) []byte {
					ready.Done()
					<-start
					return commitMetadata(batches, rows)
				})
			})
		}
		ready.Wait()
		waitFor(t, "the sidecar to read both streams' batches", func() bool { return read.Load() == 2*perStream })
		close(start)
		wg.Wait()

		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("both puts committed: %+v and %+v", res[0], res[1])
			default:
				t.Logf("the loser, %s: %v", names[i], err)
				wantCode(t, err, codes.AlreadyExists, "worker 4 of twin stage 0", "attempt fixed")
			}
		}
		if winner < 0 {
			t.Fatalf("neither put committed: %v", errs)
		}
		if !res[winner].Committed || res[winner].Rows != 300*perStream {
			t.Fatalf("the winner %s: %+v, want committed with %d rows", names[winner], res[winner], 300*perStream)
		}
		readsBack(t, e, "twin", want[winner])
		m, err := manifest.LoadWorker(ctx, e.raw, e.client.Layout(), "twin", 0, "4")
		if err != nil {
			t.Fatal(err)
		}
		stored := storedBytes(t, e, "twin")
		if len(stored) != len(m.Objects)+1 {
			t.Fatalf("stored %v, want the manifest and its %d objects", sizes(stored), len(m.Objects))
		}
		for _, o := range m.Objects {
			if b, ok := stored[e.client.Layout().ObjectKey("twin", 0, o.Key)]; !ok || int64(len(b)) != o.Size {
				t.Fatalf("object %s: stored %v, manifest %d bytes", o.Key, sizes(stored), o.Size)
			}
		}
		if ups, err := e.raw.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left open: %v %v", ups, err)
		}
		putRows(t, e, "twin", "5", 2, 2)
	})
}

// forEveryStore runs fn against the embedded server, MinIO and versitygw.
func forEveryStore(t *testing.T, fn func(t *testing.T, ep testenv.Endpoint)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Start(t)) })
	}
}
