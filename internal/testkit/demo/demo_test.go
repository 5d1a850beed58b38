package demo

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestRowIsPureFunctionOfSeedAndIndex(t *testing.T) {
	g := Generator{Seed: 42}
	var a, b Row
	for _, i := range []int64{0, 1, 7, 12345, 1_999_999} {
		g.Row(i, &a)
		// Generate something else in between: no hidden state.
		g.Row(i+1, &b)
		g.Row(i, &b)
		if a != b {
			t.Fatalf("row %d differs between calls:\n%+v\n%+v", i, a, b)
		}
	}
	g.Row(5, &a)
	Generator{Seed: 43}.Row(5, &b)
	if a == b {
		t.Fatalf("seeds 42 and 43 gave the same row 5: %+v", a)
	}
}

func TestRowValues(t *testing.T) {
	g := Generator{Seed: 1}
	var r Row
	flags := map[string]int{}
	modes := map[string]int{}
	for i := range int64(20_000) {
		g.Row(i, &r)
		if n := len(r.Comment); n < 40 || n > 100 {
			t.Fatalf("row %d: comment of %d chars %q, want 40..100", i, n, r.Comment)
		}
		if r.OrderKey != OrderKey(i) || r.LineNumber != int32(i%LinesPerOrder)+1 {
			t.Fatalf("row %d: order key %d line %d", i, r.OrderKey, r.LineNumber)
		}
		if r.Quantity < 1 || r.Quantity > 50 || r.Discount < 0 || r.Discount > 0.1 || r.Tax < 0 || r.Tax > 0.08 {
			t.Fatalf("row %d: numbers out of range: %+v", i, r)
		}
		if !(r.ShipDate < r.ReceiptDate) || r.ShipDate < startDate {
			t.Fatalf("row %d: dates out of order: ship %v receipt %v", i, r.ShipDate, r.ReceiptDate)
		}
		flags[r.ReturnFlag]++
		modes[r.ShipMode]++
	}
	if len(flags) != 3 || len(modes) != len(shipModes) {
		t.Fatalf("return flags %v, ship modes %v: want every value used", flags, modes)
	}
}

func TestOrderLinesShareAPartition(t *testing.T) {
	var r Row
	g := Generator{Seed: 3}
	for o := int64(0); o < 1000; o++ {
		g.Row(o*LinesPerOrder, &r)
		want := PartitionOf(r.OrderKey, 16)
		for l := int64(1); l < LinesPerOrder; l++ {
			g.Row(o*LinesPerOrder+l, &r)
			if p := PartitionOf(r.OrderKey, 16); p != want {
				t.Fatalf("order %d: line %d in partition %d, line 1 in %d", r.OrderKey, l, p, want)
			}
		}
	}
}

func TestPartitionsAreBalanced(t *testing.T) {
	const n, parts = 200_000, 16
	counts := make([]int, parts)
	for i := range int64(n) {
		counts[PartitionOf(OrderKey(i), parts)]++
	}
	for p, c := range counts {
		if c < n/parts*8/10 || c > n/parts*12/10 {
			t.Fatalf("partition %d has %d of %d rows: %v", p, c, n, counts)
		}
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rows    int64
		workers int
	}{
		{"even", 100, 4},
		{"uneven", 103, 4},
		{"more workers than rows", 3, 5},
		{"one worker", 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := Ranges(tc.rows, tc.workers)
			if len(rs) != tc.workers || rs[0].Lo != 0 || rs[len(rs)-1].Hi != tc.rows {
				t.Fatalf("ranges %v do not cover [0, %d)", rs, tc.rows)
			}
			for i := 1; i < len(rs); i++ {
				if rs[i].Lo != rs[i-1].Hi {
					t.Fatalf("ranges %v are not contiguous", rs)
				}
				if d := rs[i].Len() - rs[0].Len(); d < -1 || d > 1 {
					t.Fatalf("ranges %v are not balanced", rs)
				}
			}
		})
	}
	cs := Chunks(Range{10, 35}, 10)
	if len(cs) != 3 || cs[0] != (Range{10, 20}) || cs[2] != (Range{30, 35}) {
		t.Fatalf("Chunks = %v", cs)
	}
}

// TestBatchRoundTrip generates batches, encodes them as Arrow IPC, decodes
// them and checks the read-side digest equals the write-side one and the
// generator's.
func TestBatchRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	const rows, parts, batchRows = 30_000, 8, 4096
	g := Generator{Seed: 7}
	b, err := NewBatcher(g, parts, mem)
	if err != nil {
		t.Fatal(err)
	}
	written := make([]Digest, parts)
	var bufs [parts]bytes.Buffer
	var ws [parts]*ipc.Writer
	for p := range ws {
		ws[p] = ipc.NewWriter(&bufs[p], ipc.WithSchema(Schema()), ipc.WithAllocator(mem), ipc.WithLZ4())
	}
	batches := 0
	for _, c := range Chunks(Range{0, rows}, batchRows) {
		for _, part := range b.Batch(c, written) {
			if part.Record.NumRows() > batchRows/parts*2 {
				t.Fatalf("partition %d got %d rows of a %d-row batch", part.Partition, part.Record.NumRows(), batchRows)
			}
			if err := ws[part.Partition].Write(part.Record); err != nil {
				t.Fatal(err)
			}
			part.Record.Release()
			batches++
		}
	}
	b.Release()
	if batches < parts*(rows/batchRows) {
		t.Fatalf("only %d batches: input batches were not split per partition", batches)
	}

	want := g.Expected(rows, parts)
	var total int64
	for p := range parts {
		if err := ws[p].Close(); err != nil {
			t.Fatal(err)
		}
		if written[p] != want[p] {
			t.Fatalf("partition %d: batcher digest %+v, generator %+v", p, written[p], want[p])
		}
		rd, err := ipc.NewReader(&bufs[p], ipc.WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		var got Digest
		for rd.Next() {
			if err := Check(rd.RecordBatch(), p, parts, &got); err != nil {
				t.Fatal(err)
			}
		}
		if err := rd.Err(); err != nil {
			t.Fatal(err)
		}
		rd.Release()
		if got != want[p] {
			t.Fatalf("partition %d: read digest %+v, written %+v", p, got, want[p])
		}
		total += got.Rows
	}
	if total != rows {
		t.Fatalf("read %d rows, wrote %d", total, rows)
	}
}

// TestDigestCatchesCorruption changes one value of one column at a time
// and checks the digest notices, and that a wrong partition is reported.
func TestDigestCatchesCorruption(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	g := Generator{Seed: 9}
	b, _ := NewBatcher(g, 1, mem)
	defer b.Release()
	digests := make([]Digest, 1)
	parts := b.Batch(Range{0, 100}, digests)
	rec := parts[0].Record
	defer rec.Release()

	var same Digest
	if err := Check(rec, 0, 1, &same); err != nil || same != digests[0] {
		t.Fatalf("unchanged record: digest %+v, err %v; want %+v", same, err, digests[0])
	}
	for c := range int(rec.NumCols()) {
		name := rec.ColumnName(c)
		t.Run(name, func(t *testing.T) {
			bad := replaceColumn(t, mem, rec, c)
			defer bad.Release()
			var got Digest
			if err := Check(bad, 0, 1, &got); err != nil {
				if name == ColOrderKey {
					return // the order key moved the row to another partition: also caught
				}
				t.Fatal(err)
			}
			if got == digests[0] {
				t.Fatalf("changing row 17 of %s left the digest unchanged", name)
			}
		})
	}

	// Duplicated and dropped rows.
	sl := rec.NewSlice(0, 99)
	defer sl.Release()
	var short Digest
	_ = Check(sl, 0, 1, &short)
	if short == digests[0] {
		t.Fatal("dropping a row left the digest unchanged")
	}

	var r Row
	g.Row(0, &r)
	if p := PartitionOf(r.OrderKey, 4); true {
		b4, _ := NewBatcher(g, 4, mem)
		defer b4.Release()
		for _, part := range b4.Batch(Range{0, 1}, nil) {
			if err := Check(part.Record, (p+1)%4, 4, &Digest{}); err == nil {
				t.Fatal("a row read from the wrong partition was not reported")
			}
			part.Record.Release()
		}
	}
}

// replaceColumn returns rec with row 17 of column c changed.
func replaceColumn(t *testing.T, mem memory.Allocator, rec arrow.RecordBatch, c int) arrow.RecordBatch {
	t.Helper()
	col := rec.Column(c)
	bl := array.NewBuilder(mem, col.DataType())
	defer bl.Release()
	for j := range col.Len() {
		switch a := col.(type) {
		case *array.Int64:
			v := a.Value(j)
			if j == 17 {
				v++
			}
			bl.(*array.Int64Builder).Append(v)
		case *array.Int32:
			v := a.Value(j)
			if j == 17 {
				v++
			}
			bl.(*array.Int32Builder).Append(v)
		case *array.Float64:
			v := a.Value(j)
			if j == 17 {
				v += 0.5
			}
			bl.(*array.Float64Builder).Append(v)
		case *array.Date32:
			v := a.Value(j)
			if j == 17 {
				v++
			}
			bl.(*array.Date32Builder).Append(v)
		case *array.String:
			v := a.Value(j)
			if j == 17 {
				v = "x" + v[1:]
				if v == a.Value(j) {
					v = "y" + v[1:]
				}
			}
			bl.(*array.StringBuilder).Append(v)
		default:
			t.Fatalf("column %d has unexpected type %s", c, col.DataType())
		}
	}
	arr := bl.NewArray()
	defer arr.Release()
	cols := make([]arrow.Array, rec.NumCols())
	for i := range cols {
		cols[i] = rec.Column(i)
	}
	cols[c] = arr
	return array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
}

func BenchmarkBatch(b *testing.B) {
	bt, _ := NewBatcher(Generator{Seed: 1}, 64, nil)
	defer bt.Release()
	digests := make([]Digest, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for _, p := range bt.Batch(Range{int64(i) * 8192, int64(i+1) * 8192}, digests) {
			p.Record.Release()
		}
	}
}

// TestPartitioned: the whole batch holds the generated rows in order,
// its vector gives each row its order key's partition, and the digests
// are those of Batch's slices of the same rows.
func TestPartitioned(t *testing.T) {
	const parts = 16
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	g := Generator{Seed: 3}
	b, err := NewBatcher(g, parts, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	r := Range{100, 1100}
	whole, sliced := make([]Digest, parts), make([]Digest, parts)
	rec, vec := b.Partitioned(r, whole)
	defer rec.Release()
	if rec.NumRows() != r.Len() || len(vec) != int(r.Len()) {
		t.Fatalf("%d rows and %d partitions for %d generated rows", rec.NumRows(), len(vec), r.Len())
	}
	keys := rec.Column(rec.Schema().FieldIndices(ColOrderKey)[0]).(*array.Int64)
	var row Row
	for i := range int(r.Len()) {
		g.Row(r.Lo+int64(i), &row)
		if keys.Value(i) != row.OrderKey || int(vec[i]) != PartitionOf(row.OrderKey, parts) {
			t.Fatalf("row %d: order key %d in partition %d, generated %d, partition %d", i, keys.Value(i), vec[i], row.OrderKey, PartitionOf(row.OrderKey, parts))
		}
	}
	b2, _ := NewBatcher(g, parts, mem)
	defer b2.Release()
	for _, p := range b2.Batch(r, sliced) {
		p.Record.Release()
	}
	for p := range parts {
		if whole[p] != sliced[p] {
			t.Errorf("partition %d: digest %+v, Batch's %+v", p, whole[p], sliced[p])
		}
	}
}
