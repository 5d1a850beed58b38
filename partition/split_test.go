package partition

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// splitAll splits rec into partitions and checks what every split must
// hold: each input row in exactly one partition, in input order, with
// every column's value; rows of equal keys together. It returns each
// row's partition.
func splitAll(t *testing.T, rec arrow.RecordBatch, key string, partitions int) []int {
	t.Helper()
	kc := rec.Schema().FieldIndices(key)[0]
	if err := CheckKeyType(rec.Schema().Field(kc).Type); err != nil {
		t.Fatal(err)
	}
	vec, err := Assign(rec.Column(kc), partitions, nil)
	if err != nil {
		t.Fatal(err)
	}
	byPart, err := Split(rec, vec, partitions, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	var (
		ps   []int
		recs []arrow.RecordBatch
	)
	for p, r := range byPart {
		if r != nil {
			ps = append(ps, p)
			recs = append(recs, r)
		}
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	idCol := rec.Schema().FieldIndices("id")[0]
	ids := rec.Column(idCol).(*array.Int64)
	row := map[int64]int{}
	for i := range int(rec.NumRows()) {
		row[ids.Value(i)] = i
	}
	part := make([]int, rec.NumRows())
	for i := range part {
		part[i] = -1
	}
	keys := keysOf(t, rec.Column(rec.Schema().FieldIndices(key)[0]))
	for x, out := range recs {
		p := ps[x]
		if !out.Schema().Equal(rec.Schema()) {
			t.Fatalf("partition %d: schema %s, want %s", p, out.Schema(), rec.Schema())
		}
		prev := -1
		for j := range int(out.NumRows()) {
			i, ok := row[out.Column(idCol).(*array.Int64).Value(j)]
			if !ok || part[i] >= 0 || i <= prev {
				t.Fatalf("partition %d row %d: input row %d (known %v, already in partition %d, after row %d)", p, j, i, ok, part[i], prev)
			}
			prev, part[i] = i, p
			if want := partitionOf(keys[i], partitions); want != p {
				t.Fatalf("input row %d with key %#x in partition %d, want %d", i, keys[i], p, want)
			}
			for c, in := range rec.Columns() {
				got := out.Column(c)
				if got.Len() != int(out.NumRows()) {
					t.Fatalf("partition %d column %s: %d rows, want %d", p, rec.ColumnName(c), got.Len(), out.NumRows())
				}
				if !array.SliceEqual(in, int64(i), int64(i+1), got, int64(j), int64(j+1)) || in.ValueStr(i) != got.ValueStr(j) {
					t.Fatalf("partition %d row %d column %s (%s): %s, input row %d has %s", p, j, rec.ColumnName(c), in.DataType(), got.ValueStr(j), i, in.ValueStr(i))
				}
			}
		}
	}
	for i, p := range part {
		if p < 0 {
			t.Fatalf("input row %d in no partition", i)
		}
	}
	// A partition's views hold its own rows' long values, not the batch's.
	for x, out := range recs {
		if len(recs) == 1 {
			break // the batch itself
		}
		for c, col := range out.Columns() {
			v, ok := col.(*array.StringView)
			if !ok {
				continue
			}
			long := 0
			for j := range v.Len() {
				if v.IsValid(j) && v.ValueLen(j) > arrow.ViewPrefixLen+4 {
					long += v.ValueLen(j)
				}
			}
			held := 0
			for _, b := range v.Data().Buffers()[2:] {
				held += b.Len()
			}
			if held > long {
				t.Fatalf("partition %d column %s: %d bytes of view data buffers for %d bytes of its rows' long values", ps[x], out.ColumnName(c), held, long)
			}
		}
	}
	return part
}

// TestSplitCarriesEveryType splits batches holding every kind of column,
// by keys of several encodings of the same values: the same rows go to
// the same partitions, all columns carried.
func TestSplitCarriesEveryType(t *testing.T) {
	const n = 96
	fields, cols := carryColumns(t, n)
	ids := make([]string, n)
	keyLits := make([]string, n)
	names := []string{`"alpha"`, `"bravo"`, `"charlie"`, `"delta"`, `"echo"`, `"a name longer than twelve bytes"`}
	for i := range n {
		ids[i] = strconv.Itoa(n - i) // not the row number
		keyLits[i] = names[(i/3)%len(names)]
		if i%13 == 0 {
			keyLits[i] = "null"
		}
	}
	keyCols := map[string]arrow.Array{
		"string":            fromJSON(t, arrow.BinaryTypes.String, jsonList(keyLits)),
		"string_view":       fromJSON(t, arrow.BinaryTypes.StringView, jsonList(keyLits)),
		"large_binary":      fromJSON(t, arrow.BinaryTypes.LargeBinary, jsonList(func() []string { return mapLits(keyLits, base64Of) }())),
		"dictionary":        dictOf(t, arrow.BinaryTypes.String, keyLits),
		"run-end encoded":   reeOf(t, arrow.BinaryTypes.StringView, keyLits),
		"dictionary (view)": dictOf(t, arrow.BinaryTypes.BinaryView, mapLits(keyLits, base64Of)),
	}
	var want []int
	var wantFrom string
	for _, form := range slices.Sorted(func(yield func(string) bool) {
		for k := range keyCols {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(form, func(t *testing.T) {
			fs := append([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "k", Type: keyCols[form].DataType(), Nullable: true}}, fields...)
			cs := append([]arrow.Array{fromJSON(t, arrow.PrimitiveTypes.Int64, jsonList(ids)), keyCols[form]}, cols...)
			rec := array.NewRecordBatch(arrow.NewSchema(fs, nil), cs, n)
			defer rec.Release()
			for _, parts := range []int{1, 3, 4, 2048} {
				got := splitAll(t, rec, "k", parts)
				if parts == 4 {
					if want == nil {
						want, wantFrom = got, form
					} else if !slices.Equal(got, want) {
						t.Fatalf("partitions of rows by %s keys: %v\nby %s keys: %v", form, got, wantFrom, want)
					}
				}
			}
			// A slice of the batch: offsets in every column.
			sl := rec.NewSlice(5, n-7)
			defer sl.Release()
			got := splitAll(t, sl, "k", 4)
			if !slices.Equal(got, want[5:n-7]) {
				t.Fatalf("partitions of a slice's rows %v, want %v", got, want[5:n-7])
			}
		})
	}
	if want == nil {
		t.Fatal("no split")
	}
	seen := map[int]bool{}
	for _, p := range want {
		seen[p] = true
	}
	if len(seen) < 3 {
		t.Fatalf("rows in partitions %v of 4: the keys do not spread", seen)
	}
}

// TestSplitRefusesBadVectors: a vector of the wrong length names both
// lengths, a partition out of range names the row, its value and the
// count; nothing is returned.
func TestSplitRefusesBadVectors(t *testing.T) {
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil),
		[]arrow.Array{fromJSON(t, arrow.PrimitiveTypes.Int64, `[1, 2, 3]`)}, 3)
	defer rec.Release()
	for _, c := range []struct {
		parts []int32
		want  string
	}{
		{[]int32{0, 1}, "a vector of 2 partitions for a batch of 3 rows: want one partition per row"},
		{[]int32{0, 1, 2, 0}, "a vector of 4 partitions for a batch of 3 rows: want one partition per row"},
		{[]int32{0, 4, 1}, "row 1 has partition 4, out of [0, 4)"},
		{[]int32{0, 1, -1}, "row 2 has partition -1, out of [0, 4)"},
	} {
		out, err := Split(rec, c.parts, 4, nil)
		if err == nil || err.Error() != c.want || out != nil {
			t.Errorf("Split(%v): %v, %d batches; want error %q", c.parts, err, len(out), c.want)
		}
	}
}

// TestGroup: each partition's rows, ascending, and the starts of every
// partition, empty ones included.
func TestGroup(t *testing.T) {
	parts := []int32{2, 0, 2, 3, 0, 2}
	starts, rows := Group(parts, 5, nil, nil)
	if want := []int32{0, 2, 2, 5, 6, 6}; !slices.Equal(starts, want) {
		t.Fatalf("starts %v, want %v", starts, want)
	}
	if want := []int32{1, 4, 0, 2, 5, 3}; !slices.Equal(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	// Reused storage gives the same answer.
	starts2, rows2 := Group(parts, 5, starts, rows)
	if !slices.Equal(starts2, []int32{0, 2, 2, 5, 6, 6}) || !slices.Equal(rows2, []int32{1, 4, 0, 2, 5, 3}) {
		t.Fatalf("with reused storage: starts %v rows %v", starts2, rows2)
	}
}

// TestBeyondInt32: a batch of more rows, or a count of more partitions,
// than an int32 holds is refused by name, rather than wrap around.
func TestBeyondInt32(t *testing.T) {
	if err := Check(nil, math.MaxInt32+1, 4); err == nil || err.Error() != "a batch of 2147483648 rows: at most 2147483647 rows are scattered at once" {
		t.Errorf("Check of 2^31 rows: %v", err)
	}
	key := fromJSON(t, arrow.PrimitiveTypes.Int64, `[1, 2, 3]`)
	defer key.Release()
	if _, err := Assign(key, math.MaxInt32+1, nil); err == nil || err.Error() != "partition count must be between 1 and 2147483647, got 2147483648" {
		t.Errorf("Assign over 2^31 partitions: %v", err)
	}
}
