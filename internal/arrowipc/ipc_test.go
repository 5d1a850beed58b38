package arrowipc

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var unionFields = []arrow.Field{
	{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
}

// TestForIPCKeepsValues: list views and unions sliced at every offset
// come out of ForIPC with offset 0 and the same values, and arrow-go's
// IPC writer and reader carry them (it fails on the slices themselves).
func TestForIPCKeepsValues(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "lv", Type: arrow.ListViewOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "llv", Type: arrow.LargeListViewOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "du", Type: arrow.DenseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})},
		{Name: "su", Type: arrow.SparseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "lv", Type: arrow.ListViewOf(arrow.PrimitiveTypes.Int8), Nullable: true}), Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.DenseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})), Nullable: true},
	}, nil)
	rec, _, err := array.RecordFromJSON(mem, sc, strings.NewReader(`[
		{"lv": [1, 2], "llv": ["a"], "du": [3, 1], "su": [7, "x"], "st": {"lv": [1]}, "l": [[3, 5], [7, "q"]]},
		{"lv": null, "llv": [], "du": [7, "b"], "su": [3, 2], "st": null, "l": null},
		{"lv": [], "llv": ["", null], "du": [3, null], "su": [3, null], "st": {"lv": null}, "l": []},
		{"lv": [3], "llv": null, "du": [7, ""], "su": [7, ""], "st": {"lv": [2, 3]}, "l": [[7, "z"]]}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	for lo := int64(0); lo <= rec.NumRows(); lo++ {
		for hi := lo; hi <= rec.NumRows(); hi++ {
			s := rec.NewSlice(lo, hi)
			out := ForIPC(s, mem)
			for i, c := range out.Columns() {
				if c.Data().Offset() != 0 {
					t.Errorf("[%d, %d) column %d: offset %d", lo, hi, i, c.Data().Offset())
				}
				if err := array.ValidateFull(c); err != nil {
					t.Errorf("[%d, %d) column %d: %v", lo, hi, i, err)
				}
				if !array.Equal(c, s.Column(i)) {
					t.Errorf("[%d, %d) column %d: %s, want %s", lo, hi, i, c, s.Column(i))
				}
			}
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(mem))
			if err := w.Write(out); err != nil {
				t.Fatalf("[%d, %d): IPC: %v", lo, hi, err)
			}
			w.Close()
			r, err := ipc.NewReader(&buf, ipc.WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			if !r.Next() {
				t.Fatalf("[%d, %d): IPC: no batch back: %v", lo, hi, r.Err())
			}
			if back := r.RecordBatch(); !array.RecordEqual(back, s) {
				t.Errorf("[%d, %d): through IPC: %v, want %v", lo, hi, back, s)
			}
			r.Release()
			out.Release()
			s.Release()
		}
	}
}
