package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// committedBytes is what a stage holds for one worker: its manifest's
// bytes and every data object's, by key.
type committedBytes map[string][]byte

func snapshot(t *testing.T, st store.Store, l manifest.Layout, query, worker string) committedBytes {
	t.Helper()
	ctx := context.Background()
	m, err := manifest.LoadWorker(ctx, st, l, query, 0, worker)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{l.WorkerManifestKey(query, 0, worker)}
	for _, o := range m.Objects {
		keys = append(keys, l.ObjectKey(query, 0, o.Key))
	}
	out := committedBytes{}
	for _, k := range keys {
		body, err := st.GetRange(ctx, k, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = b
	}
	return out
}

// sameBytes fails t unless the worker's committed bytes are still those
// of before, and its attempt folder holds nothing else.
func sameBytes(t *testing.T, st store.Store, l manifest.Layout, query, worker, attempt string, before committedBytes) {
	t.Helper()
	after := snapshot(t, st, l, query, worker)
	if len(after) != len(before) {
		t.Fatalf("the worker's manifest now names %d keys, %d before", len(after)-1, len(before)-1)
	}
	for k, b := range before {
		if !bytes.Equal(after[k], b) {
			t.Fatalf("%s changed: %d bytes before, %d now", k, len(b), len(after[k]))
		}
	}
	objs, _, err := st.List(context.Background(), l.AttemptPrefix(query, 0, worker, attempt), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, ok := before[o.Key]; !ok {
			t.Fatalf("left behind under the attempt: %s (%d bytes)", o.Key, o.Size)
		}
	}
	if ups, err := st.ListUploads(context.Background(), ""); err != nil || len(ups) != 0 {
		t.Fatalf("uploads left open: %v %v", ups, err)
	}
}

// readIDs reads every row of a stage and returns its ids, sorted.
func readIDs(t *testing.T, c *durashuffle.Client, query string) []int64 {
	t.Helper()
	ctx := context.Background()
	s, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.ReadPartitions(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recs.Release()
	var ids []int64
	for recs.Next() {
		col := recs.RecordBatch().Column(0).(*array.Int64)
		ids = append(ids, col.Int64Values()...)
	}
	if err := recs.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func wantIDs(t *testing.T, got []int64, lo, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("read %d rows, want %d", len(got), n)
	}
	for i, id := range got {
		if id != int64(lo+i) {
			t.Fatalf("row %d has id %d, want %d", i, id, lo+i)
		}
	}
}

// writeIDs writes rows [lo, lo+n) in batches of 200 round-robin over
// partitions, from one goroutine: the same call writes the same bytes.
func writeIDs(t *testing.T, w *durashuffle.Writer, lo, n, partitions int) {
	t.Helper()
	for i := 0; i < n; i += 200 {
		rec := batch(lo+i, min(200, n-i))
		err := w.Write((i/200)%partitions, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestReusedAttemptNeverOverwrites commits a worker, then runs two more
// writers under the same explicit attempt ID: one with other rows, which
// must fail with ErrAlreadyCommitted and leave the committed bytes as they
// were, and one with the same rows (a task rerun after a lost answer),
// which is told it succeeded with the first commit's manifest. Neither
// leaves an object or an upload behind.
func TestReusedAttemptNeverOverwrites(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		l := c.Layout()
		open := func() *durashuffle.Writer {
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "reuse", Worker: "5", Attempt: "a1", Partitions: 3})
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		// About 7 MiB: more than one part, so the data object is a
		// multipart upload that a second writer could complete over it.
		first := open()
		writeIDs(t, first, 0, 7000, 3)
		m1, err := first.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m1.Totals.Parts < 2 {
			t.Fatalf("first commit stored %d parts, want a multipart object", m1.Totals.Parts)
		}
		before := snapshot(t, st, l, "reuse", "5")

		other := open()
		writeIDs(t, other, 50_000, 500, 3)
		_, err = other.Commit(ctx)
		if !errors.Is(err, manifest.ErrAlreadyCommitted) || durashuffle.IsRetryable(err) {
			t.Fatalf("commit of other content under the committed attempt: %v, want ErrAlreadyCommitted, not retryable", err)
		}
		for _, frag := range []string{"worker 5 of reuse stage 0", "attempt a1 is already committed", "the committed output is unchanged"} {
			if !strings.Contains(err.Error(), frag) {
				t.Fatalf("error %q does not say %q", err, frag)
			}
		}
		sameBytes(t, st, l, "reuse", "5", "a1", before)
		wantIDs(t, readIDs(t, c, "reuse"), 0, 7000)

		again := open()
		writeIDs(t, again, 0, 7000, 3)
		m3, err := again.Commit(ctx)
		if err != nil {
			t.Fatalf("commit of the same content under the committed attempt: %v, want success", err)
		}
		if !slices.Equal(m3.Objects, m1.Objects) {
			t.Fatalf("the repeated commit reports objects %+v, want the first commit's %+v", m3.Objects, m1.Objects)
		}
		sameBytes(t, st, l, "reuse", "5", "a1", before)
		wantIDs(t, readIDs(t, c, "reuse"), 0, 7000)
	})
}

// TestConcurrentSameAttempt lets two writers of the same worker and
// attempt, with different rows, commit at the same moment: exactly one
// commits, the other fails with ErrAlreadyCommitted, and the stage reads
// back exactly the winner's rows from the winner's objects alone.
func TestConcurrentSameAttempt(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		cfg.Hedge.Factor = 0
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		const rows = 6000
		los := [2]int{0, 1_000_000}
		var ws [2]*durashuffle.Writer
		for i := range ws {
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "twin", Worker: "0", Attempt: "same", Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			writeIDs(t, w, los[i], rows, 2)
			ws[i] = w
		}
		var (
			wg   sync.WaitGroup
			errs [2]error
			ms   [2]*manifest.Worker
		)
		start := make(chan struct{})
		for i, w := range ws {
			wg.Go(func() {
				<-start
				ms[i], errs[i] = w.Commit(ctx)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner < 0:
				winner = i
			case err == nil:
				t.Fatalf("both writers of attempt same committed: %+v and %+v", ms[0].Objects, ms[1].Objects)
			case !errors.Is(err, manifest.ErrAlreadyCommitted):
				t.Fatalf("writer %d: %v, want ErrAlreadyCommitted", i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("neither committed: %v", errs)
		}
		t.Logf("writer %d won; the other: %v", winner, errs[1-winner])
		sameBytes(t, st, c.Layout(), "twin", "0", "same", snapshot(t, st, c.Layout(), "twin", "0"))
		wantIDs(t, readIDs(t, c, "twin"), los[winner], rows)
	})
}
