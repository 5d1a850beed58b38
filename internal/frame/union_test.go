package frame

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestValidateUnions: the read side refuses a decoded dense union whose
// offset is past its child or whose type id is undeclared, with an
// error, not a panic, and takes a zero-row one without offsets (as
// arrow-go's IPC reader loads it) and null and run-end encoded arrays
// without buffers.
func TestValidateUnions(t *testing.T) {
	mem := memory.DefaultAllocator
	fields := []arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}
	dt := arrow.DenseUnionOf(fields, []arrow.UnionTypeCode{4})
	ints, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2]`))
	defer ints.Release()
	union := func(n int, types []byte, offsets *memory.Buffer) arrow.Array {
		d := array.NewData(dt, n, []*memory.Buffer{nil, memory.NewBufferBytes(types), offsets}, []arrow.ArrayData{ints.Data()}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	for _, tc := range []struct {
		name string
		a    arrow.Array
		want string
	}{
		{"valid", union(2, []byte{4, 4}, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 1}))), ""},
		{"zero rows without offsets", union(0, nil, nil), ""},
		{"offset past the child", union(2, []byte{4, 4}, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 2}))),
			`dense union: value 1 (type id 4) has offset 2, past the 2 values of child 0 "i"`},
		{"undeclared type id", union(1, []byte{0}, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0}))),
			`dense union: value 0 has type id 0, not one of the union's type codes [4]`},
		{"null without buffers", array.MakeFromData(array.NewData(arrow.Null, 3, nil, nil, 3, 0)), ""},
		{"run-end encoded without buffers", func() arrow.Array {
			b := array.NewBuilder(mem, arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32))
			defer b.Release()
			if err := b.UnmarshalJSON([]byte(`[1, 1, 2]`)); err != nil {
				t.Fatal(err)
			}
			return b.NewArray()
		}(), ""},
	} {
		err := validate(tc.a)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		tc.a.Release()
	}
}
