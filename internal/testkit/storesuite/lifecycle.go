package storesuite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/manifest"
	"github.com/durashuffle/durashuffle/reader"
	"github.com/durashuffle/durashuffle/store"
)

// Lifecycle holds a writer to its contract around the commit: Abort
// leaves nothing, of two attempts of a worker exactly one commits and
// the loser leaves nothing, Seal names the workers missing and opens in
// one request once sealed, and input the stage cannot take (another
// schema, a partition outside it) is refused naming the limit, without
// poisoning the writer.
func Lifecycle(t *testing.T, tg Target) {
	t.Run("abort", func(t *testing.T) { t.Parallel(); abortLeavesNothing(t, tg) })
	t.Run("attempts", func(t *testing.T) { t.Parallel(); twoAttemptsCommitOnce(t, tg) })
	t.Run("seal", func(t *testing.T) { t.Parallel(); seal(t, tg) })
	t.Run("schema", func(t *testing.T) { t.Parallel(); schemaChangeRefused(t, tg) })
	t.Run("partition", func(t *testing.T) { t.Parallel(); partitionOutOfRange(t, tg) })
}

// waitForPart waits until the store has taken a part upload since
// before (the counter's requests of tg.Ops.Part) and an upload shows open.
func waitForPart(t *testing.T, tg Target, ev *env, before int64) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ev.counter.Requests()[tg.Ops.Part] > before {
			if ups, err := ev.direct.ListUploads(ctx, ""); err == nil && len(ups) > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no part uploaded (%s) 20s after a spill-off writer took more than a chunk; requests %v", tg.Ops.Part, ev.counter.Requests())
		}
	}
}

func abortLeavesNothing(t *testing.T, tg Target) {
	ctx := context.Background()
	ev := newEnv(t, tg, config(t, "off"), nil)
	before := ev.counter.Requests()[tg.Ops.Part]
	w, err := ev.client.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "0", Partitions: 2, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writeWorker(w, shape{workers: 1, partitions: 2, rows: 12_000, batchRows: 100}, 0); err != nil {
		t.Fatal(err)
	}
	// Spill off: full chunks go up while input still arrives. Abort
	// once one is stored, so that there is an upload to abort.
	waitForPart(t, tg, ev, before)
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if keys := leftovers(t, ev.direct, ""); len(keys) != 0 {
		t.Fatalf("after Abort the bucket holds %v", keys)
	}
}

func twoAttemptsCommitOnce(t *testing.T, tg Target) {
	ctx := context.Background()
	ev := newEnv(t, tg, config(t, "on"), nil)
	c := ev.client
	sh := shape{workers: 1, partitions: 2, rows: 8000, batchRows: 100}
	open := func(attempt string) *durashuffle.Writer {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Worker: "3", Attempt: attempt, Partitions: 2, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writeWorker(w, sh, 3); err != nil {
			t.Fatal(err)
		}
		return w
	}
	first, second := open("first"), open("second")
	if _, err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Commit(ctx); !errors.Is(err, manifest.ErrAlreadyCommitted) {
		t.Fatalf("second attempt's commit: %v, want ErrAlreadyCommitted", err)
	}
	m, err := manifest.LoadWorker(ctx, ev.direct, c.Layout(), "q", 0, "3")
	if err != nil || m.Attempt != "first" || m.Totals.Rows != int64(sh.rows) {
		t.Fatalf("worker manifest %+v, %v: want attempt first with %d rows", m, err, sh.rows)
	}
	if loser := leftovers(t, ev.direct, c.Layout().AttemptPrefix("q", 0, "3", "second")); len(loser) != 0 {
		t.Fatalf("the losing attempt left %v", loser)
	}
	if winner := leftovers(t, ev.direct, c.Layout().AttemptPrefix("q", 0, "3", "first")); len(winner) != len(m.Objects) {
		t.Fatalf("the winning attempt holds %d objects, its manifest names %d", len(winner), len(m.Objects))
	}
}

func seal(t *testing.T, tg Target) {
	ctx := context.Background()
	ev := newEnv(t, tg, config(t, "on"), nil)
	c := ev.client
	for _, worker := range []string{"0", "1", "3"} {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "q", Stage: 1, Worker: worker, Partitions: 4, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writeWorker(w, shape{workers: 1, partitions: 4, rows: 2000, batchRows: 100}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Seal(ctx, "q", 1, 5)
	if !errors.Is(err, manifest.ErrMissingWorkers) || !strings.Contains(err.Error(), "2 of 5 workers have no manifest: 2, 4") {
		t.Fatalf("seal of 5 workers: %v, want ErrMissingWorkers naming 2 and 4", err)
	}
	if _, err := manifest.LoadStageManifest(ctx, ev.direct, c.Layout(), "q", 1); !store.IsNotFound(err) {
		t.Fatalf("a failed seal wrote a stage manifest: %v", err)
	}
	s, err := manifest.Seal(ctx, ev.st, c.Layout(), "q", 1, []string{"3", "1", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Totals.Rows != 6000 || len(s.Workers) != 3 || s.Workers[2].Worker != "3" {
		t.Fatalf("sealed %d rows of %d workers, want 6000 of 3 sorted by ID", s.Totals.Rows, len(s.Workers))
	}
	again, err := manifest.Seal(ctx, ev.st, c.Layout(), "q", 1, []string{"0", "1", "3"})
	if err != nil || again.Totals != s.Totals {
		t.Fatalf("a second seal of the same attempts: %v", err)
	}
	before := ev.counter.Total()
	loaded, err := manifest.LoadStage(ctx, ev.st, c.Layout(), "q", 1)
	if err != nil || !loaded.Sealed {
		t.Fatalf("load the sealed stage: %v", err)
	}
	if n := ev.counter.Total() - before; n != 1 {
		t.Fatalf("opening a sealed stage cost %d requests (%v), want one read", n, ev.counter.Requests())
	}
	stages, err := manifest.ListStages(ctx, ev.st, c.Layout(), "q")
	if err != nil || len(stages) != 1 || !stages[0].Sealed || stages[0].Workers != 3 {
		t.Fatalf("stages %+v, %v: want stage 1, sealed, of 3 workers", stages, err)
	}
}

// otherBatch is a batch whose schema differs from the suite's by one
// column's type.
func otherBatch() arrow.RecordBatch {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "w", Type: arrow.PrimitiveTypes.Int64},
		{Name: "p", Type: arrow.PrimitiveTypes.Int32},
		{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "pad", Type: arrow.BinaryTypes.Binary},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.Int32Builder).Append(1)
	b.Field(2).(*array.Int64Builder).Append(1)
	b.Field(3).(*array.BinaryBuilder).Append([]byte("x"))
	return b.NewRecordBatch()
}

// schemaChangeRefused: a batch of another schema is refused naming the
// partition and both schemas while parts are in flight; the writer keeps
// what it had (a commit after it loses nothing) or, aborted, leaves
// nothing.
func schemaChangeRefused(t *testing.T, tg Target) {
	ctx := context.Background()
	ev := newEnv(t, tg, config(t, "off"), nil)
	bad := otherBatch()
	defer bad.Release()
	sh := shape{workers: 1, partitions: 4, rows: 12_000, batchRows: 100}
	for _, commit := range []bool{false, true} {
		query := fmt.Sprintf("schema-%v", commit)
		before := ev.counter.Requests()[tg.Ops.Part]
		w, err := ev.client.NewWriter(ctx, durashuffle.WriterOptions{Query: query, Worker: "0", Partitions: 4, Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		wrote, err := writeWorker(w, sh, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Write(2, bad)
		if !errors.Is(err, durashuffle.ErrSchema) {
			t.Fatalf("write of another schema: %v, want ErrSchema", err)
		}
		for _, want := range []string{"partition 2", "w: type=int64", "w: type=int32"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
		if !commit {
			waitForPart(t, tg, ev, before)
			if err := w.Abort(); err != nil {
				t.Fatal(err)
			}
			if keys := leftovers(t, ev.direct, ev.client.Layout().QueryPrefix(query)); len(keys) != 0 {
				t.Fatalf("after Abort: %v", keys)
			}
			continue
		}
		if _, err := w.Commit(ctx); err != nil {
			t.Fatalf("commit after a refused batch: %v", err)
		}
		s, err := ev.client.OpenStage(ctx, query, 0)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := s.ReadPartitions(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := collect(recs)
		if err != nil {
			t.Fatal(err)
		}
		sameRows(t, "the stage after a refused batch", got, written{wrote}.partitionOrder(nil))
	}
}

// partitionOutOfRange: writes and reads of a partition outside the stage
// fail at once, naming it and the count, with no request.
func partitionOutOfRange(t *testing.T, tg Target) {
	ctx := context.Background()
	ev := newEnv(t, tg, config(t, "on"), nil)
	w, err := ev.client.NewWriter(ctx, durashuffle.WriterOptions{Query: "range", Worker: "0", Partitions: 4, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	b.Field(0).(*array.Int32Builder).Append(0)
	b.Field(1).(*array.Int32Builder).Append(3)
	b.Field(2).(*array.Int64Builder).Append(0)
	b.Field(3).(*array.BinaryBuilder).Append(pad(row{0, 3, 0}, make([]byte, padBytes)))
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	before := ev.counter.Total()
	for _, p := range []int{4, -1, 1 << 30} {
		err := w.Write(p, rec)
		if !errors.Is(err, durashuffle.ErrPartition) || !strings.Contains(err.Error(), "writer has partitions [0, 4)") {
			t.Fatalf("write to partition %d: %v, want ErrPartition naming [0, 4)", p, err)
		}
	}
	if n := ev.counter.Total() - before; n != 0 {
		t.Fatalf("%d requests for refused writes", n)
	}
	if err := w.Write(3, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := ev.client.OpenStage(ctx, "range", 0)
	if err != nil {
		t.Fatal(err)
	}
	before = ev.counter.Total()
	for _, ps := range [][]int{{4}, {0, 9}, {-1}} {
		_, err := s.ReadPartitions(ctx, ps)
		if !errors.Is(err, reader.ErrPartition) || !strings.Contains(err.Error(), "stage has 4 partitions [0, 4)") {
			t.Fatalf("read of partitions %v: %v, want ErrPartition naming [0, 4)", ps, err)
		}
	}
	if n := ev.counter.Total() - before; n != 0 {
		t.Fatalf("%d requests for refused reads", n)
	}
}
