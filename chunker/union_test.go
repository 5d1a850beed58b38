package chunker

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestValidateBatchUnions: a dense union with an offset past its child,
// an undeclared type code or a negative offset is refused with ErrBatch
// and an error naming the column and the value, never a panic; a valid
// one, and a zero-row dense union as arrow-go's IPC reader loads it
// (without an offsets buffer, which arrow-go's own validation
// dereferences), pass.
func TestValidateBatchUnions(t *testing.T) {
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	dt := arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{2, 9})
	sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.PrimitiveTypes.Int64}, {Name: "u", Type: dt}}, nil)
	mem := memory.DefaultAllocator
	ints, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2]`))
	strs, _, _ := array.FromJSON(mem, arrow.BinaryTypes.String, strings.NewReader(`["a"]`))
	keys, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int64, strings.NewReader(`[1, 2, 3]`))
	batch := func(types []byte, offsets []int32) arrow.RecordBatch {
		d := array.NewData(dt, len(types), []*memory.Buffer{nil, memory.NewBufferBytes(types), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets))},
			[]arrow.ArrayData{ints.Data(), strs.Data()}, 0, 0)
		u := array.MakeFromData(d)
		k := array.NewSlice(keys, 0, int64(len(types)))
		return array.NewRecordBatch(sc, []arrow.Array{k, u}, int64(len(types)))
	}
	const col = `column 1 "u" (dense_union<i: type=int32, nullable=2, s: type=utf8, nullable=9>): dense union: `
	for _, tc := range []struct {
		types   []byte
		offsets []int32
		want    string
	}{
		{[]byte{2, 9, 2}, []int32{0, 0, 1}, ""},
		{[]byte{2, 9, 9}, []int32{0, 0, 1}, col + `value 2 (type id 9) has offset 1, past the 1 values of child 1 "s"`},
		{[]byte{2, 3, 2}, []int32{0, 0, 1}, col + `value 1 has type id 3, not one of the union's type codes [2 9]`},
		{[]byte{2, 2}, []int32{0, -7}, col + `value 1 (type id 2) has a negative offset -7`},
		{[]byte{2, 2}, []int32{0, 1 << 30}, col + `value 1 (type id 2) has offset 1073741824, past the 2 values of child 0 "i"`},
	} {
		rec := batch(tc.types, tc.offsets)
		err := validateBatch(rec)
		rec.Release()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %v: refused: %v", tc.types, tc.offsets, err)
		case tc.want != "" && (!errors.Is(err, ErrBatch) || !strings.HasSuffix(err.Error(), tc.want)):
			t.Errorf("%v %v: %v, want ErrBatch ending %q", tc.types, tc.offsets, err, tc.want)
		}
	}

	// Zero rows through arrow-go's IPC writer and reader, with a null
	// column: the reader loads the union without offsets and the null
	// array without buffers.
	nsc := arrow.NewSchema([]arrow.Field{{Name: "u", Type: dt}, {Name: "n", Type: arrow.Null, Nullable: true}}, nil)
	empty, _, err := array.RecordFromJSON(mem, nsc, strings.NewReader(`[]`))
	if err != nil {
		t.Fatal(err)
	}
	full, _, err := array.RecordFromJSON(mem, nsc, strings.NewReader(`[{"u": [9, "x"], "n": null}, {"u": [2, 5]}]`))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(nsc))
	if err := w.Write(empty); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(full); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := ipc.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	n := 0
	for ; r.Next(); n++ {
		rec := r.RecordBatch()
		if got := len(rec.Column(1).Data().Buffers()); got != 0 {
			t.Fatalf("the IPC reader's null array has %d buffers: the test proves less than it says", got)
		}
		if err := validateBatch(rec); err != nil {
			t.Errorf("batch %d of %d rows from arrow-go's IPC reader: %v", n, rec.NumRows(), err)
		}
	}
	if n != 2 {
		t.Fatalf("%d batches read back: %v", n, r.Err())
	}
}
