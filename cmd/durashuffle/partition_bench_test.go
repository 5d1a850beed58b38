package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/demo"
)

// legacySplit is the split of durashuffle before keys were hashed by
// logical value: an int64 key as its own key, one compute.Take of the
// whole batch per partition. BenchmarkSplit compares split with it.
func legacySplit(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, column, partitions int) []arrow.RecordBatch {
	a := rec.Column(column).(*array.Int64)
	key := func(i int) int64 { return a.Value(i) }
	n := int(rec.NumRows())
	part := make([]int32, n)
	counts := make([]int32, partitions)
	for i := range n {
		p := int32(demo.PartitionOf(key(i), partitions))
		part[i] = p
		counts[p]++
	}
	offsets := make([]int32, partitions+1)
	for p, c := range counts {
		offsets[p+1] = offsets[p] + c
	}
	rows := make([]int32, n)
	fill := append([]int32(nil), offsets[:partitions]...)
	for i, p := range part {
		rows[fill[p]] = int32(i)
		fill[p]++
	}
	var recs []arrow.RecordBatch
	for p, c := range counts {
		if c == 0 {
			continue
		}
		b := array.NewInt32Builder(mem)
		b.AppendValues(rows[offsets[p]:offsets[p+1]], nil)
		idx := b.NewInt32Array()
		b.Release()
		out, err := compute.Take(compute.WithAllocator(ctx, mem), *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(idx))
		idx.Release()
		if err != nil {
			panic(err)
		}
		recs = append(recs, out.(*compute.RecordDatum).Value)
	}
	return recs
}

// BenchmarkSplit: the common path (every column of a type compute.Take
// has a kernel for) against legacySplit, in the same run: split/legacy
// and split/current of the same batch, 8192 rows into 16 partitions by
// an int64 key.
func BenchmarkSplit(b *testing.B) {
	rec := benchBatch(b, 8192)
	ctx := context.Background()
	mem := memory.DefaultAllocator
	b.Run("legacy", func(b *testing.B) {
		for b.Loop() {
			for _, r := range legacySplit(ctx, mem, rec, 0, 16) {
				r.Release()
			}
		}
	})
	b.Run("current", func(b *testing.B) {
		sp, err := newSplitter(rec.Schema(), "id", 16, mem)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, out, err := sp.split(ctx, rec)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range out {
				r.Release()
			}
		}
	})
	// For scale: a batch with a string_view column, which Take refuses,
	// so that column is gathered.
	b.Run("current-gathered", func(b *testing.B) {
		sv := fromJSON(b, arrow.BinaryTypes.StringView, jsonList(func() []string {
			out := make([]string, rec.NumRows())
			for i := range out {
				out[i] = `"a string view value"`
			}
			return out
		}()))
		fields := append(rec.Schema().Fields(), arrow.Field{Name: "sv", Type: sv.DataType()})
		r2 := array.NewRecordBatch(arrow.NewSchema(fields, nil), append(rec.Columns(), sv), rec.NumRows())
		defer r2.Release()
		sp, err := newSplitter(r2.Schema(), "id", 16, mem)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, out, err := sp.split(ctx, r2)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range out {
				r.Release()
			}
		}
	})
}

// benchBatch is n rows of common column types: int64, string, float64,
// date32, boolean and list<int32>, some null.
func benchBatch(b *testing.B, n int) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "price", Type: arrow.PrimitiveTypes.Float64},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	for i := range n {
		rb.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%17 == 0 {
			rb.Field(1).AppendNull()
		} else {
			rb.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name %d", i%97))
		}
		rb.Field(2).(*array.Float64Builder).Append(float64(i) * 1.25)
		rb.Field(3).(*array.Date32Builder).Append(arrow.Date32(10000 + i%365))
		rb.Field(4).(*array.BooleanBuilder).Append(i%3 == 0)
		lb := rb.Field(5).(*array.ListBuilder)
		lb.Append(true)
		for k := range i % 4 {
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
		}
	}
	rec := rb.NewRecordBatch()
	b.Cleanup(rec.Release)
	return rec
}
