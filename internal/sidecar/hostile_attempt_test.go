package sidecar_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
)

// attemptPut sends worker 4's output under attempt "fixed" of query q:
// n batches of worker name w (its rows say who wrote them).
func attemptPut(ctx context.Context, e *env, q, w string, n int) (flightclient.PutResult, []row, error) {
	var bs []putBatch
	var want []row
	for b := range n {
		rec, rows := genBatch(w, int32(b), 300, 64)
		bs = append(bs, putBatch{rec, partMD(b % 2)})
		want = append(want, rows...)
	}
	res, err := doPut(ctx, e.fc, putCmd(q, 0, 4, "fixed", 2), testSchema, batches(bs))
	return res, want, err
}

// storedObjects lists every key under worker 4's folder of q, with sizes.
func storedObjects(t *testing.T, e *env, q string) map[string]int64 {
	t.Helper()
	l := e.client.Layout()
	objs, _, err := e.raw.List(context.Background(), l.StagePrefix(q, 0)+"worker-4/", "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, o := range objs {
		out[o.Key] = o.Size
	}
	return out
}

func sortedRows(rs []row) []row {
	slices.SortFunc(rs, func(a, b row) int {
		if a.Worker != b.Worker {
			if a.Worker < b.Worker {
				return -1
			}
			return 1
		}
		return int(a.Seq - b.Seq)
	})
	return rs
}

// readWorker4 reads both partitions of q back and returns the rows sorted.
func readWorker4(t *testing.T, e *env, q string) []row {
	t.Helper()
	_, got, err := doGet(context.Background(), e.fc, map[string]any{"query": q, "stage": 0, "partitions": []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	return sortedRows(got)
}

// TestHostileReusedAttempt: a second DoPut for a worker and attempt that
// committed fails AlreadyExists naming both, and the first output stays
// byte for byte: the same keys and sizes, the same rows read back, no
// upload open. A repeat of the same content is told it committed.
func TestHostileReusedAttempt(t *testing.T) {
	forEveryStore(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		first, want, err := attemptPut(ctx, e, "reused", "first", 6)
		if err != nil || !first.Committed {
			t.Fatalf("first put: %+v %v", first, err)
		}
		before := storedObjects(t, e, "reused")
		want = sortedRows(want)

		_, _, err = attemptPut(ctx, e, "reused", "second", 3)
		wantCode(t, err, codes.AlreadyExists, "worker 4 of reused stage 0", "attempt fixed is already committed", "unchanged")
		if after := storedObjects(t, e, "reused"); !mapsEqual(after, before) {
			t.Fatalf("stored objects changed: before %v, after %v", before, after)
		}
		if got := readWorker4(t, e, "reused"); !slices.Equal(got, want) {
			t.Fatalf("read back %d rows, want the first put's %d", len(got), len(want))
		}

		again, _, err := attemptPut(ctx, e, "reused", "first", 6)
		if err != nil || !again.Committed || again.Rows != first.Rows || again.BytesStored != first.BytesStored {
			t.Fatalf("repeat of the same content: %+v %v, want committed as %+v", again, err, first)
		}
		if after := storedObjects(t, e, "reused"); !mapsEqual(after, before) {
			t.Fatalf("stored objects changed by the repeat: before %v, after %v", before, after)
		}
		if ups, err := e.raw.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left open: %v %v", ups, err)
		}
		// The sidecar serves on.
		if got := readWorker4(t, e, "reused"); !slices.Equal(got, want) {
			t.Fatalf("read back %d rows after the repeat, want %d", len(got), len(want))
		}
	})
}

// TestHostileConcurrentAttempt: two DoPuts with the same worker and
// attempt at once; exactly one commits, the other gets AlreadyExists, and
// the stage reads back exactly the winner's rows from its objects alone.
func TestHostileConcurrentAttempt(t *testing.T) {
	forEveryStore(t, func(t *testing.T, ep testenv.Endpoint) {
		e := newEnv(t, ep, envOptions{})
		ctx := context.Background()
		names := [2]string{"alpha", "bravo"}
		var (
			wg   sync.WaitGroup
			res  [2]flightclient.PutResult
			rows [2][]row
			errs [2]error
		)
		for i, name := range names {
			wg.Go(func() { res[i], rows[i], errs[i] = attemptPut(ctx, e, "twin", name, 8) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("both puts committed: %+v and %+v", res[0], res[1])
			default:
				if status.Code(err) != codes.AlreadyExists {
					t.Fatalf("put %s: %v, want AlreadyExists", names[i], err)
				}
			}
		}
		if winner < 0 {
			t.Fatalf("neither put committed: %v", errs)
		}
		if got := readWorker4(t, e, "twin"); !slices.Equal(got, sortedRows(rows[winner])) {
			t.Fatalf("read back %d rows, want the winner %s's %d", len(got), names[winner], len(rows[winner]))
		}
		m, err := manifest.LoadWorker(ctx, e.raw, e.client.Layout(), "twin", 0, "4")
		if err != nil {
			t.Fatal(err)
		}
		objs := storedObjects(t, e, "twin")
		if len(objs) != len(m.Objects)+1 {
			t.Fatalf("stored %v, want the manifest and its %d objects", objs, len(m.Objects))
		}
		for _, o := range m.Objects {
			if objs[e.client.Layout().ObjectKey("twin", 0, o.Key)] != o.Size {
				t.Fatalf("object %s: stored %v, manifest %d bytes", o.Key, objs, o.Size)
			}
		}
		if ups, err := e.raw.ListUploads(ctx, ""); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left open: %v %v", ups, err)
		}
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// forEveryStore runs fn against the embedded server, MinIO and versitygw.
func forEveryStore(t *testing.T, fn func(t *testing.T, ep testenv.Endpoint)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Start(t)) })
	}
}
