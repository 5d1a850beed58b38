package arrowcheck_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/arrowcheck"
)

var unionFields = []arrow.Field{
	{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
}

// HostileUnion is a union of type dt over children of 3 ints and 2
// strings, with the given type ids and (dense) offsets.
func HostileUnion(t *testing.T, dt arrow.UnionType, types []int8, offsets []int32) arrow.ArrayData {
	t.Helper()
	mem := memory.DefaultAllocator
	ints, _, _ := array.FromJSON(mem, arrow.PrimitiveTypes.Int32, strings.NewReader(`[1, 2, 3]`))
	strs, _, _ := array.FromJSON(mem, arrow.BinaryTypes.String, strings.NewReader(`["a", "b"]`))
	defer ints.Release()
	defer strs.Release()
	ids := make([]byte, len(types))
	for i, v := range types {
		ids[i] = byte(v)
	}
	bufs := []*memory.Buffer{nil, memory.NewBufferBytes(ids)}
	if offsets != nil {
		bufs = append(bufs, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets)))
	}
	return array.NewData(dt, len(types), bufs, []arrow.ArrayData{ints.Data(), strs.Data()}, 0, 0)
}

// TestUnionsRefuseWhatArrowForbids: a union whose type id is not one of
// its codes, or whose dense offset is negative, past its child, or
// before the child's previous value, or whose buffers are missing or
// short, is refused with an error saying which value and why; valid
// unions (codes that are not 0..n-1, zero-length without offsets) pass.
func TestUnionsRefuseWhatArrowForbids(t *testing.T) {
	dense := arrow.DenseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})
	sparse := arrow.SparseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})
	for _, tc := range []struct {
		name    string
		d       arrow.ArrayData
		wantErr string
	}{
		{"dense valid", HostileUnion(t, dense, []int8{3, 7, 3, 3, 7}, []int32{0, 0, 1, 2, 1}), ""},
		{"dense repeats an offset", HostileUnion(t, dense, []int8{3, 3}, []int32{1, 1}), ""},
		{"sparse valid", HostileUnion(t, sparse, []int8{7, 3}, nil), ""},
		{"dense empty without offsets", array.NewData(dense, 0, []*memory.Buffer{nil, nil, nil}, HostileUnion(t, dense, nil, []int32{}).Children(), 0, 0), ""},
		{"dense offset past the child", HostileUnion(t, dense, []int8{3, 7, 7}, []int32{0, 1, 2}),
			`dense union: value 2 (type id 7) has offset 2, past the 2 values of child 1 "s"`},
		{"dense negative offset", HostileUnion(t, dense, []int8{3, 3}, []int32{0, -1}),
			"dense union: value 1 (type id 3) has a negative offset -1"},
		{"dense offsets go back", HostileUnion(t, dense, []int8{3, 3}, []int32{2, 1}),
			"dense union: value 1 (type id 3) has offset 1, before the offset 2 of the child's value before it"},
		{"dense undeclared type id", HostileUnion(t, dense, []int8{3, 4}, []int32{0, 0}),
			"dense union: value 1 has type id 4, not one of the union's type codes [3 7]"},
		{"dense negative type id", HostileUnion(t, dense, []int8{-1}, []int32{0}),
			"dense union: value 0 has type id -1, not one of the union's type codes [3 7]"},
		{"sparse undeclared type id", HostileUnion(t, sparse, []int8{0, 3}, nil),
			"sparse union: value 0 has type id 0, not one of the union's type codes [3 7]"},
		{"dense without offsets", array.NewData(dense, 2, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3, 3}), nil}, HostileUnion(t, dense, nil, []int32{}).Children(), 0, 0),
			"dense union: offsets buffer is missing or shorter (0 bytes) than offset 0 and length 2 of 4-byte offsets"},
		{"dense short offsets", array.NewData(dense, 2, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3, 3}), memory.NewBufferBytes([]byte{0, 0, 0, 0})}, HostileUnion(t, dense, nil, []int32{}).Children(), 0, 0),
			"dense union: offsets buffer is missing or shorter (4 bytes) than offset 0 and length 2 of 4-byte offsets"},
		{"dense two buffers", array.NewData(dense, 1, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3})}, HostileUnion(t, dense, nil, []int32{}).Children(), 0, 0),
			"dense union: 2 buffers, want 3"},
		{"sparse short type ids", array.NewData(sparse, 3, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3})}, HostileUnion(t, sparse, nil, nil).Children(), 0, 0),
			"sparse union: child 1 \"s\" has 2 values, the union 3 (offset 0 and length 3)"},
		{"sparse type ids missing", array.NewData(sparse, 2, []*memory.Buffer{nil, nil}, HostileUnion(t, sparse, nil, nil).Children(), 0, 0),
			"sparse union: type ids buffer is missing or shorter (0 bytes) than offset 0 and length 2"},
		{"union with a validity bitmap", array.NewData(sparse, 1, []*memory.Buffer{memory.NewBufferBytes([]byte{1}), memory.NewBufferBytes([]byte{3})}, HostileUnion(t, sparse, nil, nil).Children(), 0, 0),
			"sparse union: has a validity bitmap: a union has none (its nulls are its children's)"},
		{"union with a null count", array.NewData(sparse, 1, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3})}, HostileUnion(t, sparse, nil, nil).Children(), 1, 0),
			"sparse union: null count 1: a union has none of its own"},
		{"union missing a child", array.NewData(dense, 1, []*memory.Buffer{nil, memory.NewBufferBytes([]byte{3}), memory.NewBufferBytes(make([]byte, 4))}, HostileUnion(t, dense, nil, []int32{}).Children()[:1], 0, 0),
			"dense union: 1 children, the type has 2 fields"},
	} {
		err := arrowcheck.Unions(tc.d)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
		if tc.wantErr == "" {
			// What Unions passes, arrow-go's validation takes (after
			// Normalize) without panicking.
			d, changed := arrowcheck.Normalize(tc.d)
			a := array.MakeFromData(d)
			if err := array.ValidateFull(a); err != nil {
				t.Errorf("%s: arrow-go refuses what Unions passed: %v", tc.name, err)
			}
			a.Release()
			if changed {
				d.Release()
			}
		}
	}
}

// TestUnionsNamePath: a union below a struct and a list is found and its
// error names the way down.
func TestUnionsNamePath(t *testing.T) {
	dense := arrow.DenseUnionOf(unionFields, []arrow.UnionTypeCode{3, 7})
	bad := HostileUnion(t, dense, []int8{7}, []int32{5})
	st := arrow.StructOf(arrow.Field{Name: "u", Type: dense})
	sd := array.NewData(st, 1, []*memory.Buffer{nil}, []arrow.ArrayData{bad}, 0, 0)
	lt := arrow.ListOf(st)
	ld := array.NewData(lt, 1, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 1}))}, []arrow.ArrayData{sd}, 0, 0)
	want := `child 0 "item": child 0 "u": dense union: value 0 (type id 7) has offset 5, past the 2 values of child 1 "s"`
	if err := arrowcheck.Unions(ld); err == nil || err.Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
}
