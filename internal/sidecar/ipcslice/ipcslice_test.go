package ipcslice_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/sidecar/ipcslice"
	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// TestCompactCorpus: every case of the type corpus, its batches sliced
// as the corpus cuts them, goes through arrow-go's IPC writer once
// compacted and reads back equal; list views and dense unions sliced
// are what the writer refuses uncompacted (the reason for Compact), and
// Compact shares the batch it does not need to copy.
func TestCompactCorpus(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	cases := arrowcorpus.Cases(mem)
	defer arrowcorpus.Release(cases)
	refused := map[string]bool{}
	for _, c := range cases {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(c.Schema), ipc.WithAllocator(mem))
		for i, b := range c.Batches {
			var raw bytes.Buffer
			// Not mem: the writer leaks what it allocated when it fails.
			rw := ipc.NewWriter(&raw, ipc.WithSchema(c.Schema))
			if rw.Write(b) != nil {
				refused[c.Name] = true
			}
			rw.Close()
			cb, err := ipcslice.Compact(b, mem)
			if err != nil {
				t.Fatalf("%s batch %d: %v", c.Name, i, err)
			}
			if cb == b && (c.Name == "list_views" || c.Name == "union") && b.Column(0).Data().Offset() != 0 {
				t.Errorf("%s batch %d: sliced, not copied", c.Name, i)
			}
			if err := w.Write(cb); err != nil {
				t.Errorf("%s batch %d compacted: %v", c.Name, i, err)
			}
			cb.Release()
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewReader(&buf, ipc.WithAllocator(mem))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		var got []arrow.RecordBatch
		for r.Next() {
			b := r.RecordBatch()
			b.Retain()
			got = append(got, b)
		}
		if err := r.Err(); err != nil {
			t.Errorf("%s: read: %v", c.Name, err)
		}
		if err := arrowcorpus.Diff(c.Schema, c.Batches, r.Schema(), got); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		for _, b := range got {
			b.Release()
		}
		r.Release()
	}
	if !refused["list_views"] || !refused["union"] || len(refused) != 2 {
		t.Errorf("arrow-go's IPC writer refused sliced batches of %v, want list_views and union: if it now writes them, Compact can go", refused)
	}
}

// TestCompactHeadSlice: the first tenth of a dense union and of a list
// view (a slice at offset 0) is encoded, compacted, in about a tenth of
// the bytes of the whole; uncompacted, in more than half of them
// (arrow-go's writer sends a head slice's children or values whole).
func TestCompactHeadSlice(t *testing.T) {
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "dense", Type: arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{0, 1}), Nullable: true},
		{Name: "lv", Type: arrow.ListViewOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	u := b.Field(0).(*array.DenseUnionBuilder)
	lv := b.Field(1).(*array.ListViewBuilder)
	for i := range 10000 {
		u.Append(1)
		u.Child(1).(*array.StringBuilder).Append(fmt.Sprintf("string value %d", i))
		lv.AppendWithSize(true, 1)
		lv.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("list item %d", i))
	}
	whole := b.NewRecordBatch()
	defer whole.Release()
	size := func(rec arrow.RecordBatch) int {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		w.Close()
		return buf.Len()
	}
	head := whole.NewSlice(0, 1000)
	defer head.Release()
	c, err := ipcslice.Compact(head, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	all, raw, got := size(whole), size(head), size(c)
	if raw < all/2 {
		t.Errorf("a tenth of the rows sliced encodes in %d bytes, the whole in %d: arrow-go's writer no longer sends a head slice whole", raw, all)
	}
	if got > all/8 {
		t.Errorf("a tenth of the rows compacted encodes in %d bytes, the whole in %d", got, all)
	}
	if err := arrowcorpus.Diff(sc, []arrow.RecordBatch{head}, sc, []arrow.RecordBatch{c}); err != nil {
		t.Error(err)
	}
}
