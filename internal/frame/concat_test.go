package frame

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// concatTypes has every layout Concat copies itself (each primitive,
// boolean, strings and binaries of both offset widths, fixed-size
// binary, null, lists of both widths, fixed-size list, struct, map, and
// these nested in each other) and some it hands to array.Concatenate
// (dictionary, string view), all nullable.
var concatTypes = arrow.NewSchema([]arrow.Field{
	{Name: "bool", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
	{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
	{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "u8", Type: arrow.PrimitiveTypes.Uint8, Nullable: true},
	{Name: "u16", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
	{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
	{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
	{Name: "f16", Type: arrow.FixedWidthTypes.Float16, Nullable: true},
	{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "date32", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "date64", Type: arrow.FixedWidthTypes.Date64, Nullable: true},
	{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	{Name: "time32", Type: arrow.FixedWidthTypes.Time32ms, Nullable: true},
	{Name: "time64", Type: arrow.FixedWidthTypes.Time64ns, Nullable: true},
	{Name: "dur", Type: arrow.FixedWidthTypes.Duration_ms, Nullable: true},
	{Name: "interval", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true},
	{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 4}, Nullable: true},
	{Name: "dec256", Type: &arrow.Decimal256Type{Precision: 40, Scale: 2}, Nullable: true},
	{Name: "str", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "lstr", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "lbin", Type: arrow.BinaryTypes.LargeBinary, Nullable: true},
	{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 5}, Nullable: true},
	{Name: "null", Type: arrow.Null, Nullable: true},
	{Name: "list", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "llist", Type: arrow.LargeListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "fslist", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Int16), Nullable: true},
	{Name: "struct", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "c", Type: arrow.ListOf(arrow.FixedWidthTypes.Boolean), Nullable: true}), Nullable: true},
	{Name: "liststruct", Type: arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true})), Nullable: true},
	{Name: "map", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Float64), Nullable: true},
	{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
	{Name: "view", Type: arrow.BinaryTypes.StringView, Nullable: true},
}, nil)

// appendRandom appends one random value to b, or a null one time in
// nullEvery (never when nullEvery is 0).
func appendRandom(b array.Builder, r *rand.Rand, nullEvery int) {
	if nullEvery > 0 && r.IntN(nullEvery) == 0 {
		b.AppendNull()
		return
	}
	word := fmt.Sprintf("w%x", r.Uint32()>>r.IntN(32))
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(r.IntN(2) == 0)
	case *array.Int8Builder:
		b.Append(int8(r.Int()))
	case *array.Int16Builder:
		b.Append(int16(r.Int()))
	case *array.Int32Builder:
		b.Append(r.Int32())
	case *array.Int64Builder:
		b.Append(r.Int64())
	case *array.Uint8Builder:
		b.Append(uint8(r.Uint32()))
	case *array.Uint16Builder:
		b.Append(uint16(r.Uint32()))
	case *array.Uint32Builder:
		b.Append(r.Uint32())
	case *array.Uint64Builder:
		b.Append(r.Uint64())
	case *array.Float16Builder:
		b.Append(float16.New(r.Float32()))
	case *array.Float32Builder:
		b.Append(r.Float32())
	case *array.Float64Builder:
		b.Append(r.Float64())
	case *array.Date32Builder:
		b.Append(arrow.Date32(r.IntN(30000)))
	case *array.Date64Builder:
		b.Append(arrow.Date64(r.Int64N(1 << 40)))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(r.Int64()))
	case *array.Time32Builder:
		b.Append(arrow.Time32(r.IntN(86_400_000)))
	case *array.Time64Builder:
		b.Append(arrow.Time64(r.Int64N(86_400_000_000_000)))
	case *array.DurationBuilder:
		b.Append(arrow.Duration(r.Int64()))
	case *array.MonthDayNanoIntervalBuilder:
		b.Append(arrow.MonthDayNanoInterval{Months: r.Int32(), Days: r.Int32(), Nanoseconds: r.Int64()})
	case *array.Decimal128Builder:
		b.Append(decimal128.FromI64(r.Int64()))
	case *array.Decimal256Builder:
		b.Append(decimal256.FromI64(r.Int64()))
	case *array.StringBuilder:
		b.Append(word)
	case *array.LargeStringBuilder:
		b.Append(word + word)
	case *array.BinaryBuilder:
		b.Append([]byte(word))
	case *array.StringViewBuilder:
		b.Append(word + "-a string view longer than twelve bytes")
	case *array.FixedSizeBinaryBuilder:
		b.Append([]byte(fmt.Sprintf("%05d", r.IntN(100000))))
	case *array.NullBuilder:
		b.AppendNull()
	case *array.ListBuilder:
		b.Append(true)
		for range r.IntN(4) {
			appendRandom(b.ValueBuilder(), r, nullEvery)
		}
	case *array.LargeListBuilder:
		b.Append(true)
		for range r.IntN(4) {
			appendRandom(b.ValueBuilder(), r, nullEvery)
		}
	case *array.FixedSizeListBuilder:
		b.Append(true)
		for range b.Type().(*arrow.FixedSizeListType).Len() {
			appendRandom(b.ValueBuilder(), r, nullEvery)
		}
	case *array.StructBuilder:
		b.Append(true)
		for f := range b.NumField() {
			appendRandom(b.FieldBuilder(f), r, nullEvery)
		}
	case *array.MapBuilder:
		b.Append(true)
		for k := range r.IntN(3) {
			b.KeyBuilder().(*array.StringBuilder).Append(fmt.Sprintf("k%d", k))
			appendRandom(b.ItemBuilder(), r, nullEvery)
		}
	case *array.BinaryDictionaryBuilder:
		if err := b.AppendString([]string{"red", "green", "blue", "a longer value"}[r.IntN(4)]); err != nil {
			panic(err)
		}
	default:
		panic(fmt.Sprintf("no generator for %T", b))
	}
}

func randomBatch(t testing.TB, mem memory.Allocator, schema *arrow.Schema, n int, seed uint64, nullEvery int) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	r := rand.New(rand.NewPCG(seed, 7))
	for range n {
		for _, f := range b.Fields() {
			appendRandom(f, r, nullEvery)
		}
	}
	rec := b.NewRecordBatch()
	for i, c := range rec.Columns() {
		if err := array.ValidateFull(c); err != nil {
			t.Fatalf("generated column %q: %v", schema.Field(i).Name, err)
		}
	}
	return rec
}

// withoutBitmaps returns rec as an IPC round trip gives it back: columns
// without nulls have no validity bitmap at all.
func withoutBitmaps(t testing.TB, mem memory.Allocator, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	var buf bytes.Buffer
	if _, err := Encode(&buf, rec.Schema(), []arrow.RecordBatch{rec}, None, mem); err != nil {
		t.Fatal(err)
	}
	out := readFrame(t, mem, rec.Schema(), buf.Bytes())
	if out.Column(3).Data().Buffers()[0] != nil {
		t.Fatal("a column without nulls kept its validity bitmap through IPC")
	}
	return out
}

// readFrame reads the one batch of a frame with arrow's own IPC reader
// (Decode refuses columns of type null).
func readFrame(t testing.TB, mem memory.Allocator, schema *arrow.Schema, b []byte) arrow.RecordBatch {
	t.Helper()
	d, err := NewDecoder(schema)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := d.Stream(b)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ipc.NewReader(bytes.NewReader(stream), ipc.WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Next() {
		t.Fatalf("no batch in frame: %v", r.Err())
	}
	rec := r.RecordBatch()
	rec.Retain()
	return rec
}

// checkConcat concatenates pieces with Concat and compares every column
// with array.Concatenate's and, row range by row range, with the pieces.
func checkConcat(t *testing.T, mem memory.Allocator, schema *arrow.Schema, pieces []arrow.RecordBatch) {
	t.Helper()
	got, err := Concat(schema, pieces, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	var rows int64
	for _, p := range pieces {
		rows += p.NumRows()
	}
	if got.NumRows() != rows {
		t.Fatalf("Concat has %d rows, want %d", got.NumRows(), rows)
	}
	for i, col := range got.Columns() {
		name := schema.Field(i).Name
		if col.Len() != int(rows) || col.Data().Offset() != 0 {
			t.Fatalf("column %q: length %d offset %d, want %d rows at offset 0", name, col.Len(), col.Data().Offset(), rows)
		}
		if err := array.ValidateFull(col); err != nil {
			t.Fatalf("column %q: %v", name, err)
		}
		parts := make([]arrow.Array, len(pieces))
		for j, p := range pieces {
			parts[j] = p.Column(i)
		}
		want, err := array.Concatenate(parts, mem)
		if err != nil {
			t.Fatal(err)
		}
		if !array.Equal(col, want) {
			t.Errorf("column %q differs from array.Concatenate:\n got %v\nwant %v", name, col, want)
		}
		if col.NullN() != want.NullN() {
			t.Errorf("column %q: %d nulls, array.Concatenate has %d", name, col.NullN(), want.NullN())
		}
		nulls := 0
		if bm := col.NullBitmapBytes(); bm != nil && col.DataType().ID() != arrow.NULL {
			nulls = col.Len() - bitutil.CountSetBits(bm, 0, col.Len())
		} else if col.DataType().ID() == arrow.NULL {
			nulls = col.Len()
		}
		if nulls != col.NullN() {
			t.Errorf("column %q: null count %d, bitmap has %d nulls", name, col.NullN(), nulls)
		}
		want.Release()
		// Row by row as text: a dictionary column's indices change when
		// pieces with different dictionaries are unified.
		pos := 0
		for j, p := range pieces {
			pc := p.Column(i)
			for k := range pc.Len() {
				if g, w := col.ValueStr(pos+k), pc.ValueStr(k); g != w {
					t.Fatalf("column %q, row %d: %s, piece %d row %d has %s", name, pos+k, g, j, k, w)
				}
			}
			pos += pc.Len()
		}
	}
}

func TestConcatEveryType(t *testing.T) {
	for _, tc := range []struct {
		name              string
		nullsA, nullsB    int
		bitmapsB, sliceB2 bool
	}{
		{name: "nulls", nullsA: 5, nullsB: 3},
		{name: "no nulls", nullsA: 0, nullsB: 0},
		{name: "no nulls, no bitmaps", nullsA: 0, nullsB: 0, bitmapsB: true},
		{name: "nulls and pieces without bitmaps", nullsA: 4, nullsB: 0, bitmapsB: true},
		{name: "mostly nulls", nullsA: 2, nullsB: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			a := randomBatch(t, mem, concatTypes, 300, 1, tc.nullsA)
			b := randomBatch(t, mem, concatTypes, 200, 2, tc.nullsB)
			if tc.bitmapsB {
				d := withoutBitmaps(t, mem, b)
				b.Release()
				b = d
			}
			defer a.Release()
			defer b.Release()
			outer := a.NewSlice(100, 300)
			defer outer.Release()
			var pieces []arrow.RecordBatch
			for _, p := range []struct {
				rec    arrow.RecordBatch
				lo, hi int64
			}{
				{a, 0, 0}, // empty
				{a, 0, 37},
				{a, 37, 37}, // empty, at an offset
				{a, 37, 150},
				{b, 5, 199},
				{outer, 50, 200}, // a slice of a slice
				{b, 199, 200},    // one row
				{a, 3, 11},       // not byte-aligned, bits shift
				{b, 0, 200},      // all of b
				{a, 299, 300},
			} {
				pieces = append(pieces, p.rec.NewSlice(p.lo, p.hi))
			}
			defer releaseAll(pieces)
			checkConcat(t, mem, concatTypes, pieces)
			checkConcat(t, mem, concatTypes, pieces[1:2]) // one piece
			checkConcat(t, mem, concatTypes, pieces[:1])  // nothing but an empty piece
		})
	}
}

// TestConcatUnknownNullCount: a column whose null count is not yet known
// (as arrays built from raw data can be) is counted from its bitmap.
func TestConcatUnknownNullCount(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, nil)
	bm := memory.NewBufferBytes([]byte{0b1011_0110, 0b0000_0011})
	vals := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}))
	d := array.NewData(arrow.PrimitiveTypes.Int32, 10, []*memory.Buffer{bm, vals}, nil, array.UnknownNullCount, 0)
	defer d.Release()
	var pieces []arrow.RecordBatch
	for _, r := range [][2]int64{{0, 10}, {1, 9}, {3, 4}} {
		s := array.NewSliceData(d, r[0], r[1])
		col := array.MakeFromData(s)
		pieces = append(pieces, array.NewRecordBatch(schema, []arrow.Array{col}, r[1]-r[0]))
		col.Release()
		s.Release()
	}
	defer releaseAll(pieces)
	checkConcat(t, mem, schema, pieces)
}

// dirtyAllocator hands out memory that is not zeroed, as the chunker's
// buffer reuse does, filled with fill.
type dirtyAllocator struct {
	memory.Allocator
	fill byte
}

func (a dirtyAllocator) Allocate(size int) []byte {
	b := a.Allocator.Allocate(size)
	for i := range b {
		b[i] = a.fill
	}
	return b
}

func (a dirtyAllocator) Reallocate(size int, b []byte) []byte {
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// TestConcatDirtyMemory: frames encoded from pieces are the same bytes
// whatever the allocator's memory held before, so Concat writes every
// byte it hands out (bitmap tails included).
func TestConcatDirtyMemory(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	a := randomBatch(t, mem, concatTypes, 301, 3, 4)
	defer a.Release()
	var pieces []arrow.RecordBatch
	for lo := int64(0); lo < a.NumRows(); lo += 13 {
		pieces = append(pieces, a.NewSlice(lo, min(lo+13, a.NumRows())))
	}
	defer releaseAll(pieces)
	var frames [][]byte
	for _, fill := range []byte{0x00, 0xff, 0xa5} {
		for _, comp := range []string{None, LZ4} {
			var buf bytes.Buffer
			if _, err := Encode(&buf, concatTypes, pieces, comp, dirtyAllocator{mem, fill}); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, buf.Bytes())
		}
	}
	for i := 2; i < len(frames); i++ {
		if !bytes.Equal(frames[i], frames[i%2]) {
			t.Fatalf("frame %d differs from frame %d: memory contents leak into frames", i, i%2)
		}
	}
	out := readFrame(t, mem, concatTypes, frames[1])
	defer out.Release()
	if !array.RecordEqual(out, a) {
		t.Fatal("decoded frame differs from the rows")
	}
}

func TestConcatTypeMismatch(t *testing.T) {
	mem := memory.NewGoAllocator()
	a := batch(t, mem, 0, 3)
	defer a.Release()
	other := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int32},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	if rec, err := Concat(other, []arrow.RecordBatch{a, a}, mem); err == nil {
		rec.Release()
		t.Fatal("Concat of batches of another schema succeeded")
	}
}

// TestConcatOffsetChildren: children that start at an offset of their
// own (a struct assembled from sliced fields, lists over a slice of
// values) are read from there.
func TestConcatOffsetChildren(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	src := randomBatch(t, mem, concatTypes, 120, 5, 4)
	defer src.Release()
	field := func(name string) arrow.Array {
		return src.Column(src.Schema().FieldIndices(name)[0])
	}
	// struct{i64, str} over rows 20..120 of two columns.
	i64 := array.NewSlice(field("i64"), 20, 120)
	str := array.NewSlice(field("str"), 20, 120)
	st, err := array.NewStructArray([]arrow.Array{i64, str}, []string{"a", "b"})
	i64.Release()
	str.Release()
	if err != nil {
		t.Fatal(err)
	}
	// list<str> of 50 lists of two values, over values 17..117.
	offs := make([]int32, 51)
	for i := range offs {
		offs[i] = int32(2 * i)
	}
	vals := array.NewSlice(field("str"), 17, 117)
	ob := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offs))
	ld := array.NewData(arrow.ListOf(arrow.BinaryTypes.String), 50, []*memory.Buffer{nil, ob}, []arrow.ArrayData{vals.Data()}, 0, 0)
	fd := array.NewData(arrow.FixedSizeListOf(2, arrow.BinaryTypes.String), 50, []*memory.Buffer{nil}, []arrow.ArrayData{vals.Data()}, 0, 0)
	vals.Release()
	lst := array.MakeFromData(ld)
	ld.Release()
	fsl := array.MakeFromData(fd)
	fd.Release()
	defer fsl.Release()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "struct", Type: st.DataType(), Nullable: true},
		{Name: "list", Type: lst.DataType(), Nullable: true},
		{Name: "fslist", Type: fsl.DataType(), Nullable: true},
	}, nil)
	s50 := array.NewSlice(st, 0, 50)
	st.Release()
	rec := array.NewRecordBatch(schema, []arrow.Array{s50, lst, fsl}, 50)
	s50.Release()
	lst.Release()
	defer rec.Release()
	var pieces []arrow.RecordBatch
	for _, r := range [][2]int64{{0, 7}, {7, 7}, {9, 31}, {31, 50}} {
		pieces = append(pieces, rec.NewSlice(r[0], r[1]))
	}
	defer releaseAll(pieces)
	checkConcat(t, mem, schema, pieces)
}

// FuzzConcat cuts two batches of every type into pieces where the input
// says and checks Concat against array.Concatenate and the rows.
func FuzzConcat(f *testing.F) {
	f.Add(uint64(1), uint8(5), []byte{0, 37, 0, 113, 200, 1})
	f.Add(uint64(2), uint8(0), []byte{255, 3})
	f.Add(uint64(3), uint8(1), []byte{})
	f.Fuzz(func(t *testing.T, seed uint64, nullEvery uint8, cuts []byte) {
		if len(cuts) > 64 {
			cuts = cuts[:64]
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		a := randomBatch(t, mem, concatTypes, 256, seed, int(nullEvery%8))
		defer a.Release()
		b := randomBatch(t, mem, concatTypes, 100, seed+1, int(nullEvery/8%8))
		defer b.Release()
		// Each pair of bytes is a piece: its source and start, then its length.
		pieces := []arrow.RecordBatch{b.NewSlice(0, 0)}
		for i := 0; i+1 < len(cuts); i += 2 {
			src := a
			if cuts[i]%2 == 1 {
				src = b
			}
			lo := int64(cuts[i]/2) % src.NumRows()
			hi := min(src.NumRows(), lo+int64(cuts[i+1]))
			pieces = append(pieces, src.NewSlice(lo, hi))
		}
		defer releaseAll(pieces)
		checkConcat(t, mem, concatTypes, pieces)
	})
}

// TestAccumulatorEveryType appends random pieces of every type Concat
// copies (slices at odd offsets, nulls at several rates) into an
// Accumulator, and compares what it finishes with array.Concatenate of
// the same pieces, column by column; the result also survives a frame
// round trip.
func TestAccumulatorEveryType(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	// Every type of concatTypes but the dictionary and the view.
	types := arrow.NewSchema(concatTypes.Fields()[:concatTypes.NumFields()-2], nil)
	for _, nullEvery := range []int{0, 3, 1} {
		a := randomBatch(t, mem, types, 257, uint64(nullEvery)+7, nullEvery)
		acc, ok := NewAccumulator(types)
		if !ok {
			t.Fatal("NewAccumulator refused the types Concat copies")
		}
		var pieces []arrow.RecordBatch
		for round := range 2 {
			for lo := int64(0); lo < a.NumRows(); lo += 19 {
				s := a.NewSlice(lo, min(lo+19, a.NumRows()))
				if err := acc.Append(s); err != nil {
					t.Fatal(err)
				}
				pieces = append(pieces, s)
			}
			var capacity int64
			for _, c := range acc.cols {
				capacity += c.capacity()
			}
			if acc.Rows() != int64(round+1)*a.NumRows() || acc.Held() <= 0 || acc.Held() != capacity {
				t.Fatalf("rows %d held %d (buffers' capacity %d) after round %d", acc.Rows(), acc.Held(), capacity, round)
			}
		}
		got := acc.Finish()
		if acc.Rows() != 0 || acc.Held() != 0 {
			t.Fatalf("after Finish: rows %d held %d", acc.Rows(), acc.Held())
		}
		for i := range types.NumFields() {
			arrs := make([]arrow.Array, len(pieces))
			for j, p := range pieces {
				arrs[j] = p.Column(i)
			}
			want, err := array.Concatenate(arrs, mem)
			if err != nil {
				t.Fatal(err)
			}
			if err := array.ValidateFull(got.Column(i)); err != nil {
				t.Fatalf("nulls every %d, column %q: %v", nullEvery, types.Field(i).Name, err)
			}
			if !array.Equal(got.Column(i), want) {
				t.Fatalf("nulls every %d, column %q differs from array.Concatenate", nullEvery, types.Field(i).Name)
			}
			want.Release()
		}
		var buf bytes.Buffer
		if _, err := Encode(&buf, types, []arrow.RecordBatch{got}, LZ4, mem); err != nil {
			t.Fatal(err)
		}
		back := readFrame(t, mem, types, buf.Bytes())
		if !array.RecordEqual(back, got) {
			t.Fatalf("nulls every %d: the accumulated batch changed through a frame", nullEvery)
		}
		back.Release()
		got.Release()
		releaseAll(pieces)
		a.Release()
	}
	if _, ok := NewAccumulator(concatTypes); ok {
		t.Fatal("NewAccumulator took a dictionary column")
	}
}
