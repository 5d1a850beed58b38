package frame

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// gatherBatch is n rows of every type an Accumulator copies, some null.
func gatherBatch(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	types := []arrow.DataType{
		arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Float32,
		arrow.BinaryTypes.String, arrow.BinaryTypes.LargeBinary, arrow.FixedWidthTypes.Boolean, arrow.Null,
		&arrow.Decimal256Type{Precision: 40, Scale: 2}, &arrow.FixedSizeBinaryType{ByteWidth: 3},
		arrow.FixedWidthTypes.MonthDayNanoInterval,
		arrow.ListOf(arrow.BinaryTypes.String), arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true}),
		arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Int16), arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64),
	}
	lit := func(dt arrow.DataType, i int) string {
		if i%5 == 3 && dt.ID() != arrow.BOOL || dt.ID() == arrow.NULL {
			return "null"
		}
		switch dt.ID() {
		case arrow.STRING:
			return fmt.Sprintf("%q", strings.Repeat("s", i%7))
		case arrow.LARGE_BINARY:
			return `"AP8="`
		case arrow.BOOL:
			return fmt.Sprint(i%3 == 0)
		case arrow.DECIMAL256:
			return fmt.Sprintf(`"%d.%02d"`, i, i%100)
		case arrow.FIXED_SIZE_BINARY:
			return `"YWJj"`
		case arrow.INTERVAL_MONTH_DAY_NANO:
			return fmt.Sprintf(`{"months": %d, "days": 1, "nanoseconds": 2}`, i)
		case arrow.LIST:
			return fmt.Sprintf(`["x%d", null]`, i)
		case arrow.STRUCT:
			return fmt.Sprintf(`{"a": %d}`, i)
		case arrow.FIXED_SIZE_LIST:
			return fmt.Sprintf(`[%d, %d]`, i%100, i%7)
		case arrow.MAP:
			return fmt.Sprintf(`[{"key": "k%d", "value": %d}]`, i, i)
		}
		return fmt.Sprint(i % 100)
	}
	var fields []arrow.Field
	var cols []arrow.Array
	for c, dt := range types {
		lits := make([]string, n)
		for i := range lits {
			lits[i] = lit(dt, i)
		}
		a, _, err := array.FromJSON(memory.DefaultAllocator, dt, strings.NewReader("["+strings.Join(lits, ",")+"]"))
		if err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		defer a.Release()
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("c%d", c), Type: dt, Nullable: true})
		cols = append(cols, a)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(n))
}

// TestAppendRows: the rows gathered at any row numbers, in any order,
// are those appended one by one as ranges, of a batch and of a slice of
// it, after rows already held and with nulls first met in the gather.
func TestAppendRows(t *testing.T) {
	rec := gatherBatch(t, 40)
	defer rec.Release()
	sl := rec.NewSlice(3, 37)
	defer sl.Release()
	for _, in := range []arrow.RecordBatch{rec, sl} {
		for _, rows := range [][]int32{{0, 1, 2}, {5, 2, 9, 9, 0}, {3, 8, 13, 18}, {10, 11, 12, 20, 21, 30}} {
			got, ok := NewAccumulator(in.Schema())
			if !ok {
				t.Fatal("the accumulator does not copy the schema")
			}
			want, _ := NewAccumulator(in.Schema())
			// Rows held before: no nulls, so the gather starts the bitmaps.
			for _, a := range []*Accumulator{got, want} {
				if err := a.AppendRange(in, 0, 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := got.AppendRows(in, rows); err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if err := want.AppendRange(in, int64(r), 1); err != nil {
					t.Fatal(err)
				}
			}
			g, w := got.Finish(), want.Finish()
			if !array.RecordEqual(g, w) {
				t.Fatalf("rows %v of a batch of %d rows:\ngathered %v\nappended %v", rows, in.NumRows(), g, w)
			}
			if err := g.Column(4).(*array.String).ValidateFull(); err != nil {
				t.Fatalf("rows %v: gathered strings: %v", rows, err)
			}
			g.Release()
			w.Release()
		}
	}
}

// TestArenaAppendRows: the rows land where AppendRows says, and added is
// the bytes they take.
func TestArenaAppendRows(t *testing.T) {
	rec := gatherBatch(t, 20)
	defer rec.Release()
	a, ok := NewArena(rec.Schema())
	if !ok {
		t.Fatal("no arena for the schema")
	}
	seg, lo, grew, added, err := a.AppendRows(rec, []int32{4, 1})
	if err != nil || seg != 0 || lo != 0 || grew <= 0 || added <= 0 {
		t.Fatalf("first rows: segment %d at %d, grew %d, added %d, %v", seg, lo, grew, added, err)
	}
	seg, lo, _, _, err = a.AppendRows(rec, []int32{7})
	if err != nil || seg != 0 || lo != 2 {
		t.Fatalf("next row: segment %d at %d, %v; want segment 0 at 2", seg, lo, err)
	}
	segs, _, _ := a.Finish()
	defer segs[0].Release()
	for i, r := range []int64{4, 1, 7} {
		if !array.SliceEqual(segs[0].Column(0), int64(i), int64(i+1), rec.Column(0), r, r+1) {
			t.Errorf("arena row %d is not input row %d", i, r)
		}
	}
}
