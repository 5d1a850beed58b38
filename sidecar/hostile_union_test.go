package sidecar_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
)

// TestPutHostileUnion: dense unions are carried now, so their checks
// face clients: a dense union whose offset points past its child, and
// one whose type id is not among the union's codes, are refused with
// InvalidArgument naming the column and the value (never a panic in
// arrow-go's own union validation); nothing is left, and the server
// serves the next DoPut, which reads back as written.
func TestPutHostileUnion(t *testing.T) {
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}
	dt := arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{2, 9})
	sc := arrow.NewSchema([]arrow.Field{{Name: "u", Type: dt}}, nil)
	mem := memory.DefaultAllocator
	ints, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2]`))
	strs, _, _ := array.FromJSON(mem, arrow.BinaryTypes.String, strings.NewReader(`["a"]`))
	defer ints.Release()
	defer strs.Release()
	cases := []struct {
		types   []byte
		offsets []int32
		want    string
	}{
		{[]byte{2, 9, 9}, []int32{0, 0, 5}, `value 2 (type id 9) has offset 5, past the 1 values of child 1 "s"`},
		{[]byte{2, 7}, []int32{0, 0}, `value 1 has type id 7, not one of the union's type codes [2 9]`},
	}
	streams := make([][]byte, len(cases))
	for i, tc := range cases {
		d := array.NewData(dt, len(tc.types), []*memory.Buffer{nil, memory.NewBufferBytes(tc.types), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(tc.offsets))},
			[]arrow.ArrayData{ints.Data(), strs.Data()}, 0, 0)
		u := array.MakeFromData(d)
		d.Release()
		rec := array.NewRecordBatch(sc, []arrow.Array{u}, int64(len(tc.types)))
		u.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		w.Close()
		rec.Release()
		streams[i] = buf.Bytes()
	}
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ep := b.Start(t)
			for i, tc := range cases {
				refusedStream(t, ep, "hostile-union-"+strconv.Itoa(i), streams[i], `column 0 "u" (dense_union<`, tc.want)
			}
		})
	}
}
