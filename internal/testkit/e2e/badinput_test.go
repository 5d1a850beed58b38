package e2e_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/reader"
)

// otherBatch is a batch of a schema that differs from schema's by one
// column's type.
func otherBatch() arrow.RecordBatch {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int32},
		{Name: "blob", Type: arrow.BinaryTypes.Binary},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).Append(1)
	b.Field(1).(*array.BinaryBuilder).Append([]byte("x"))
	return b.NewRecordBatch()
}

// TestSchemaChangeRejected: a batch whose schema differs from the writer's
// is refused naming the partition and both schemas; the writer keeps what
// it had (a commit after it loses nothing), and Abort leaves nothing.
func TestSchemaChangeRejected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, counter := testenv.MinIO(t).NewStore(t)
	c := testenv.Client(t, uploadingConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	defer c.Close()
	bad := otherBatch()
	defer bad.Release()

	for _, commit := range []bool{false, true} {
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "schema", Worker: "0", Partitions: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := writeRows(w, 12_000, 4); err != nil { // ~12 MiB: parts are in flight
			t.Fatal(err)
		}
		err = w.Write(2, bad)
		if !errors.Is(err, durashuffle.ErrSchema) {
			t.Fatalf("write of another schema: %v, want ErrSchema", err)
		}
		for _, want := range []string{"partition 2", "id: type=int32", "id: type=int64"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
		if !commit {
			// Parts go up in the background: wait for the upload to show.
			deadline := time.Now().Add(20 * time.Second)
			for ups, _ := st.ListUploads(ctx, ""); len(ups) == 0 || counter.Requests()["UploadPart"] == 0; ups, _ = st.ListUploads(ctx, "") {
				if time.Now().After(deadline) {
					t.Fatal("nothing was uploaded before the bad batch: the abort proves nothing")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := w.Abort(); err != nil {
				t.Fatal(err)
			}
			ups, _ := st.ListUploads(ctx, "")
			objs, _, _ := st.List(ctx, "", "")
			if len(ups) != 0 || len(objs) != 0 {
				t.Fatalf("after Abort: %d uploads, %d objects", len(ups), len(objs))
			}
			continue
		}
		// The refused batch did not poison the writer: more rows, then a
		// commit with every good row.
		rec := batch(12_000, 100)
		err = w.Write(1, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		m, err := w.Commit(ctx)
		if err != nil || m.Totals.Rows != 12_100 {
			t.Fatalf("commit after a refused batch: %v rows, %v", m, err)
		}
	}
}

// TestPartitionOutOfRange: writes and reads of a partition outside the
// stage fail at once, naming it and the count, with no request.
func TestPartitionOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, counter := testenv.Embedded(t).NewStore(t)
	c := testenv.Client(t, testConfig(), durashuffle.WithStore(st), durashuffle.WithCounter(counter))
	defer c.Close()
	w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "range", Worker: "0", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(0, 10)
	defer rec.Release()
	for _, p := range []int{4, -1, 1 << 30} {
		err := w.Write(p, rec)
		if !errors.Is(err, durashuffle.ErrPartition) || !strings.Contains(err.Error(), "writer has partitions [0, 4)") {
			t.Fatalf("write to partition %d: %v", p, err)
		}
	}
	if n := counter.Total(); n != 0 {
		t.Fatalf("%d requests for refused writes", n)
	}
	if err := w.Write(3, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenStage(ctx, "range", 0)
	if err != nil {
		t.Fatal(err)
	}
	before := counter.Total()
	for _, ps := range [][]int{{4}, {0, 9}, {-1}} {
		_, err := s.ReadPartitions(ctx, ps)
		if !errors.Is(err, reader.ErrPartition) || !strings.Contains(err.Error(), "stage has 4 partitions [0, 4)") {
			t.Fatalf("read of partitions %v: %v", ps, err)
		}
	}
	if n := counter.Total() - before; n != 0 {
		t.Fatalf("%d requests for refused reads", n)
	}
}
