package chunker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/frame"
	"github.com/durashuffle/durashuffle/internal/testkit/demo"
	"github.com/durashuffle/durashuffle/internal/testkit/hostile"
	"github.com/durashuffle/durashuffle/partition"
)

// scatterOf is a partition vector for ids [lo, lo+n): half the rows in
// partition 0 (a large share, taken as a batch of its own), the others
// spread over the rest, a few rows each (copied into the arena).
func scatterOf(lo, n, partitions int) []int32 {
	out := make([]int32, n)
	for i := range out {
		id := lo + i
		if id%2 == 0 {
			out[i] = 0
		} else {
			out[i] = int32(1 + (id*7)%(partitions-1))
		}
	}
	return out
}

// TestWritePartitioned: batches scattered by a vector come back with
// every row in its partition, once, in input order, whether they were
// copied into the arena or taken as batches of their own, and nothing
// is leaked.
func TestWritePartitioned(t *testing.T) {
	const parts, batches, n = 64, 12, 3000
	for _, form := range []struct {
		name string
		conv func(arrow.RecordBatch) arrow.RecordBatch // nil: as built
	}{
		{"arena", nil},
		{"no arena (string view)", withView},
	} {
		t.Run(form.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer mem.AssertSize(t, 0)
			sink := newSink(t, 100_000, 4)
			o := opts(parts)
			o.Mem = mem
			w, err := New(context.Background(), o, sink)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int][]int64{}
			for b := range batches {
				rec := rows(mem, b*n, n)
				if form.conv != nil {
					v := form.conv(rec)
					rec.Release()
					rec = v
				}
				vec := scatterOf(b*n, n, parts)
				for i, p := range vec {
					want[int(p)] = append(want[int(p)], int64(b*n+i))
				}
				if err := w.WritePartitioned(rec, vec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			res, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			if res.Rows != batches*n {
				t.Fatalf("%d rows, want %d", res.Rows, batches*n)
			}
			got := decodeAll(t, sink, res)
			if len(got) != len(want) {
				t.Fatalf("%d partitions hold rows, want %d", len(got), len(want))
			}
			for p, ids := range want {
				if !slices.Equal(got[p], ids) {
					t.Fatalf("partition %d: ids %v, want %v", p, got[p][:min(8, len(got[p]))], ids[:min(8, len(ids))])
				}
			}
		})
	}
}

// withView is rec with its payload as a string view, a type the arena
// does not copy.
func withView(rec arrow.RecordBatch) arrow.RecordBatch {
	s := rec.Column(1).(*array.String)
	b := array.NewStringViewBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := range s.Len() {
		b.Append(s.Value(i) + " and enough more bytes not to be inlined")
	}
	v := b.NewArray()
	defer v.Release()
	sc := arrow.NewSchema([]arrow.Field{rec.Schema().Field(0), {Name: "payload", Type: arrow.BinaryTypes.StringView}}, nil)
	return array.NewRecordBatch(sc, []arrow.Array{rec.Column(0), v}, rec.NumRows())
}

// TestWritePartitionedRefused: a vector of the wrong length, a partition
// out of range, an invalid batch and a batch of another schema are
// refused naming what is wrong, and take nothing: the writer commits the
// rows taken before and after.
func TestWritePartitionedRefused(t *testing.T) {
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(4), sink)
	if err != nil {
		t.Fatal(err)
	}
	rec := rows(memory.DefaultAllocator, 0, 3)
	defer rec.Release()
	if err := w.WritePartitioned(rec, []int32{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	bad := array.NewRecordBatch(schema, []arrow.Array{rec.Column(0), rec.Column(1)}, 2) // columns of 3 rows
	defer bad.Release()
	other := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	narrow := array.NewRecordBatch(other, []arrow.Array{rec.Column(0)}, 3)
	defer narrow.Release()
	for _, c := range []struct {
		rec   arrow.RecordBatch
		parts []int32
		is    error
		want  string
	}{
		{rec, []int32{0, 1}, ErrPartition, "a vector of 2 partitions for a batch of 3 rows"},
		{rec, []int32{0, 1, 2, 3}, ErrPartition, "a vector of 4 partitions for a batch of 3 rows"},
		{rec, []int32{0, 4, 1}, ErrPartition, "row 1 has partition 4, out of [0, 4)"},
		{rec, []int32{-2, 0, 1}, ErrPartition, "row 0 has partition -2, out of [0, 4)"},
		{bad, []int32{0, 1}, ErrBatch, `column 0 "id" (int64): 3 values, the batch has 2 rows`},
		{narrow, []int32{0, 1, 2}, ErrSchema, "a partitioned batch got"},
	} {
		err := w.WritePartitioned(c.rec, c.parts)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("WritePartitioned(%v): %v, want %v with %q", c.parts, err, c.is, c.want)
		}
	}
	if err := w.WritePartitioned(rec, []int32{3, 3, 0}); err != nil {
		t.Fatal(err)
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, sink, res)
	want := map[int][]int64{0: {0, 2}, 1: {1}, 2: {2}, 3: {0, 1}}
	for p, ids := range want {
		if !slices.Equal(got[p], ids) {
			t.Errorf("partition %d: ids %v, want %v", p, got[p], ids)
		}
	}
}

// TestWriteKeyed: rows go where partition.Assign puts their key; a key
// column out of range or of a nested type is refused, naming it.
func TestWriteKeyed(t *testing.T) {
	const parts = 16
	sink := newSink(t, 100_000, 4)
	w, err := New(context.Background(), opts(parts), sink)
	if err != nil {
		t.Fatal(err)
	}
	rec := rows(memory.DefaultAllocator, 0, 500)
	defer rec.Release()
	if err := w.WriteKeyed(rec, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteKeyed(rec, 2); err == nil || !strings.Contains(err.Error(), "key column 2 is out of range: the batch has 2 columns") {
		t.Errorf("key column 2: %v", err)
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, sink, res)
	n := 0
	for p, ids := range got {
		for _, id := range ids {
			if want := partition.OfInt64(id, parts); want != p {
				t.Fatalf("id %d in partition %d, want %d", id, p, want)
			}
		}
		n += len(ids)
	}
	if n != 500 || len(got) < parts/2 {
		t.Fatalf("%d rows in %d partitions, want 500 spread", n, len(got))
	}

	lists := arrow.NewSchema([]arrow.Field{{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}}, nil)
	lb := array.NewRecordBuilder(memory.DefaultAllocator, lists)
	defer lb.Release()
	lb.Field(0).(*array.ListBuilder).Append(true)
	lrec := lb.NewRecordBatch()
	defer lrec.Release()
	w2, err := New(context.Background(), opts(parts), newSink(t, 100_000, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort(errors.New("test done"))
	if err := w2.WriteKeyed(lrec, 0); err == nil || !strings.Contains(err.Error(), `key column 0 "tags": cannot partition by a column of type list<item: int32, nullable>`) {
		t.Errorf("a list key: %v", err)
	}
}

// BenchmarkWriteScattered is BenchmarkWriteWide's input handed over as
// whole 8192-row batches with their partition vectors (WritePartitioned)
// instead of a slice per partition: compare the two in one run.
func BenchmarkWriteScattered(b *testing.B) {
	for _, partitions := range []int{64, 2048} {
		bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
		if err != nil {
			b.Fatal(err)
		}
		var recs []arrow.RecordBatch
		var vecs [][]int32
		var logical int64
		for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: 400_000}, 8192) {
			rec, vec := bt.Partitioned(r, nil)
			recs, vecs = append(recs, rec), append(vecs, slices.Clone(vec))
			logical += frame.LogicalSize(rec)
		}
		bt.Release()
		b.Run(fmt.Sprintf("partitions=%d", partitions), func(b *testing.B) {
			b.SetBytes(logical)
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			var frames int
			for b.Loop() {
				w, err := New(context.Background(), Options{
					Schema: demo.Schema(), Partitions: partitions, FrameTargetBytes: 1 << 20,
					CoalesceBudget: 32 << 20, Encoders: 2, Compression: frame.LZ4,
					Mem: memory.DefaultAllocator,
				}, newDiscardSink(8<<20, 4))
				if err != nil {
					b.Fatal(err)
				}
				for i, rec := range recs {
					if err := w.WritePartitioned(rec, vecs[i]); err != nil {
						b.Fatal(err)
					}
				}
				res, err := w.Close()
				if err != nil {
					b.Fatal(err)
				}
				var stored int64
				for _, obj := range res.Objects {
					stored += obj.Size
				}
				frames = len(res.Frames)
				b.ReportMetric(float64(stored)/float64(logical), "stored/logical")
			}
			b.ReportMetric(float64(frames), "frames")
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
		for _, r := range recs {
			r.Release()
		}
	}
}

// BenchmarkMapTask is a map task of the demo end to end on the CPU:
// generate each 8192-row batch and hand it to the writer, either cut
// into a slice per partition (Batcher.Batch, a Write per slice) or whole
// with its partition vector (Batcher.Partitioned, WritePartitioned).
// cpu-ns/op is the process's CPU time per op; compare slices and whole
// at each partition count in one run.
func BenchmarkMapTask(b *testing.B) {
	const rows = 400_000
	for _, partitions := range []int{64, 2048} {
		for _, whole := range []bool{false, true} {
			name := fmt.Sprintf("partitions=%d/slices", partitions)
			if whole {
				name = fmt.Sprintf("partitions=%d/whole", partitions)
			}
			b.Run(name, func(b *testing.B) {
				cpu0 := cpuTime(b)
				for b.Loop() {
					bt, err := demo.NewBatcher(demo.Generator{Seed: 1}, partitions, nil)
					if err != nil {
						b.Fatal(err)
					}
					w, err := New(context.Background(), Options{
						Schema: demo.Schema(), Partitions: partitions, FrameTargetBytes: 1 << 20,
						CoalesceBudget: 32 << 20, Encoders: 2, Compression: frame.LZ4,
						Mem: memory.DefaultAllocator,
					}, newDiscardSink(8<<20, 4))
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range demo.Chunks(demo.Range{Lo: 0, Hi: rows}, 8192) {
						if whole {
							rec, vec := bt.Partitioned(r, nil)
							err = w.WritePartitioned(rec, vec)
							rec.Release()
						} else {
							for _, p := range bt.Batch(r, nil) {
								if err == nil {
									err = w.Write(p.Partition, p.Record)
								}
								p.Record.Release()
							}
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					if _, err := w.Close(); err != nil {
						b.Fatal(err)
					}
					bt.Release()
				}
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestScatterRefusesHostileBatches: every hostile case is refused by
// WritePartitioned and WriteKeyed with ErrBatch naming the column and
// the reason, before the key column is read; the writer keeps the good
// rows it had.
func TestScatterRefusesHostileBatches(t *testing.T) {
	for _, c := range hostile.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			bad, err := c.Batch()
			if err != nil {
				t.Fatal(err)
			}
			defer bad.Release()
			o := opts(4)
			if c.Column != "" {
				o.Schema = hostile.Schema
			}
			w, err := New(context.Background(), o, newSink(t, 100_000, 4))
			if err != nil {
				t.Fatal(err)
			}
			good := hostile.Good()
			defer good.Release()
			if c.Column != "" {
				if err := w.WritePartitioned(good, make([]int32, good.NumRows())); err != nil {
					t.Fatal(err)
				}
			}
			vec := make([]int32, max(0, bad.NumRows()))
			for _, call := range []struct {
				name string
				err  error
			}{
				{"WritePartitioned", w.WritePartitioned(bad, vec)},
				{"WriteKeyed", w.WriteKeyed(bad, 0)},
			} {
				if !errors.Is(call.err, ErrBatch) {
					t.Fatalf("%s: %v, want ErrBatch", call.name, call.err)
				}
				for _, want := range []string{c.Column, c.Want} {
					if !strings.Contains(call.err.Error(), want) {
						t.Errorf("%s: error %q does not say %q", call.name, call.err, want)
					}
				}
			}
			res, err := w.Close()
			if err != nil {
				t.Fatalf("Close after refused batches: %v", err)
			}
			want := int64(hostile.GoodRows)
			if c.Column == "" {
				want = 0
			}
			if res.Rows != want {
				t.Fatalf("closed with %d rows, want %d", res.Rows, want)
			}
		})
	}
}

// TestScatterWithinBudget: a batch of many times coalesce_budget,
// scattered over many partitions, is copied into the run's arena in
// pieces of whole partitions, with runs flushed between them, not all
// at once; every partition's rows still come back whole, in order.
func TestScatterWithinBudget(t *testing.T) {
	const parts, n = 2048, 150_000
	sink := newSink(t, 100_000, 4)
	o := opts(parts)
	w, err := New(context.Background(), o, sink)
	if err != nil {
		t.Fatal(err)
	}
	rec := rows(memory.DefaultAllocator, 0, n)
	defer rec.Release()
	size := frame.LogicalSize(rec)
	if size < 8*o.CoalesceBudget {
		t.Fatalf("batch of %d bytes, want at least 8x the %d-byte budget", size, o.CoalesceBudget)
	}
	vec := scatterOf(0, n, parts)
	want := map[int][]int64{}
	for i, p := range vec {
		want[int(p)] = append(want[int(p)], int64(i))
	}
	if err := w.WritePartitioned(rec, vec); err != nil {
		t.Fatal(err)
	}
	// Each run holds at most the budget: the batch took about
	// size / budget runs, not one.
	if runs, least := w.co.runs, int(size/o.CoalesceBudget)/2; runs < least {
		t.Errorf("a %d-byte batch took %d runs of a %d-byte budget, want at least %d: copied all at once", size, runs, o.CoalesceBudget, least)
	}
	res, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, sink, res)
	for p := range parts {
		if fmt.Sprint(got[p]) != fmt.Sprint(want[p]) {
			t.Fatalf("partition %d: %d rows, want %d, or out of order", p, len(got[p]), len(want[p]))
		}
	}
}

// TestShareOf: a batch's bytes apportioned to k of its n rows, exact
// where bytes x k passes int64.
func TestShareOf(t *testing.T) {
	for _, c := range []struct{ bytes, k, n, want int64 }{
		{100, 1, 4, 25},
		{0, 3, 7, 0},
		{10 << 30, 1 << 30, 1 << 31, 5 << 30},          // 10 GiB x 2^30 passes int64
		{1<<62 + 7, 3, 3, 1<<62 + 7},                   // all of it
		{1 << 40, (1 << 31) - 1, 1 << 31, 1<<40 - 512}, // all but one row
	} {
		if got := shareOf(c.bytes, c.k, c.n); got != c.want {
			t.Errorf("shareOf(%d, %d, %d) = %d, want %d", c.bytes, c.k, c.n, got, c.want)
		}
	}
}
