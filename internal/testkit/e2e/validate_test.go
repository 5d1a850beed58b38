package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/store"
)

// TestWriteRefusesHostileBatches: on every backend, Writer.Write refuses
// each hostile batch (a zero-column schema, offsets[0] = -20, list
// offsets past the child, string and list offsets that decrease) with an
// error wrapping durashuffle.ErrBatch that names the partition, the column
// and what is wrong, and makes no request for it. A writer that had a
// good batch before commits that batch alone, and the stage reads back
// whole (before, the non-panicking cases were stored and every read of
// the partition failed "offsets decrease"); a writer that had only the
// bad batch aborts leaving no manifest, object or upload.
func TestWriteRefusesHostileBatches(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		for i, hc := range hostile.Cases() {
			t.Run(hc.Name, func(t *testing.T) {
				query := fmt.Sprintf("hostile-%d", i)
				bad, err := hc.Batch()
				if err != nil {
					t.Fatal(err)
				}
				defer bad.Release()
				refused := func(w *durashuffle.Writer) {
					t.Helper()
					before := counter.Total()
					err := w.Write(3, bad)
					if !errors.Is(err, durashuffle.ErrBatch) {
						t.Fatalf("Write: %v, want durashuffle.ErrBatch", err)
					}
					for _, want := range []string{"batch for partition 3", hc.Column, hc.Want} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("error %q does not say %q", err, want)
						}
					}
					if n := counter.Total() - before; n != 0 {
						t.Fatalf("%d requests for a refused batch", n)
					}
				}

				// Worker 0: a good batch, the bad one, commit.
				w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 4})
				if err != nil {
					t.Fatal(err)
				}
				good := hostile.Good()
				defer good.Release()
				if err := w.Write(1, good); err != nil {
					t.Fatal(err)
				}
				refused(w)
				if _, err := w.Commit(ctx); err != nil {
					t.Fatalf("commit after a refused batch: %v", err)
				}
				got := readStage(t, c, query, 4)
				if len(got[1]) != 1 || !array.RecordEqual(got[1][0], good) || len(got[0])+len(got[2])+len(got[3]) != 0 {
					t.Fatalf("stage holds %v, want the good batch alone in partition 1", got)
				}

				// Worker 1: only the bad batch, abort.
				w, err = c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "1", Partitions: 4})
				if err != nil {
					t.Fatal(err)
				}
				refused(w)
				if err := w.Abort(); err != nil {
					t.Fatal(err)
				}
				nothingStored(t, c, query, "1")
			})
		}
	})
}

// TestWriteFlippedBytes: on every backend, 200 IPC bodies with seeded byte
// flips (three bytes each) are decoded as a receiver would and written:
// each batch is either refused with durashuffle.ErrBatch naming a column, or
// taken, and then the committed stage reads back equal to it. At least a
// few flips land in offsets or strings and are refused: the test proves
// the check, not just the absence of a panic.
func TestWriteFlippedBytes(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		good := hostile.Stream(hostile.Schema, hostile.Good())
		var refused, taken, unreadable int
		const flips = 200
		for seed := range uint64(flips) {
			recs, err := hostile.Decode(hostile.Flip(good, seed, 3))
			if err != nil {
				unreadable++ // the IPC reader refused the framing
				continue
			}
			query := fmt.Sprintf("flip-%d", seed)
			w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 2})
			if err != nil {
				t.Fatal(err)
			}
			werr := w.Write(1, recs[0])
			switch {
			case werr == nil:
				taken++
				if _, err := w.Commit(ctx); err != nil {
					t.Fatalf("seed %d: commit of a batch Write took: %v", seed, err)
				}
				got := readStage(t, c, query, 2)
				if len(got[1]) != 1 || !array.RecordEqual(got[1][0], recs[0]) {
					t.Fatalf("seed %d: read back %v, want the batch written %v", seed, got[1], recs[0])
				}
			case errors.Is(werr, durashuffle.ErrBatch) && strings.Contains(werr.Error(), "column "):
				refused++
				if err := w.Abort(); err != nil {
					t.Fatal(err)
				}
				nothingStored(t, c, query, "0")
			default:
				t.Fatalf("seed %d: Write: %v, want nil or ErrBatch naming a column", seed, werr)
			}
			for _, r := range recs {
				r.Release()
			}
		}
		t.Logf("%d refused, %d taken and read back, %d not readable as IPC", refused, taken, unreadable)
		if refused < 15 {
			t.Fatalf("only %d of %d flipped batches refused: the flips do not reach the offsets", refused, flips)
		}
	})
}

// readStage reads every partition of stage 0 of query: the batches of
// each, in order. It fails the test if the stage does not read back.
func readStage(t *testing.T, c *durashuffle.Client, query string, partitions int) [][]arrow.RecordBatch {
	t.Helper()
	ctx := context.Background()
	s, err := c.OpenStage(ctx, query, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]arrow.RecordBatch, partitions)
	for p := range out {
		rr, err := s.ReadPartitions(ctx, []int{p})
		if err != nil {
			t.Fatal(err)
		}
		for rr.Next() {
			rec := rr.RecordBatch()
			rec.Retain()
			out[p] = append(out[p], rec)
			t.Cleanup(rec.Release)
		}
		err = rr.Err()
		rr.Release()
		if err != nil {
			t.Fatalf("read partition %d of %s back: %v", p, query, err)
		}
	}
	return out
}

// nothingStored fails the test if worker of stage 0 of query has a
// manifest, an object or an open multipart upload.
func nothingStored(t *testing.T, c *durashuffle.Client, query, worker string) {
	t.Helper()
	ctx := context.Background()
	l := c.Layout()
	ups, err := c.Store().ListUploads(ctx, l.StagePrefix(query, 0))
	if err != nil {
		t.Fatal(err)
	}
	objs, _, err := c.Store().List(ctx, l.StagePrefix(query, 0)+"worker-"+worker+"/", "")
	if err != nil {
		t.Fatal(err)
	}
	_, merr := manifest.LoadWorker(ctx, c.Store(), l, query, 0, worker)
	if len(ups) != 0 || len(objs) != 0 || !store.IsNotFound(merr) {
		t.Fatalf("%s worker %s: %d open uploads, %d objects %v, worker manifest: %v", query, worker, len(ups), len(objs), objs, merr)
	}
}
