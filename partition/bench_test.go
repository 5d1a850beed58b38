package partition

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkSplit: Assign and Split of 8192 rows into 16 partitions by an
// int64 key, with every column of a type compute.Take has a kernel for,
// and with a string_view column, which Take refuses, so that column is
// gathered.
func BenchmarkSplit(b *testing.B) {
	rec := benchBatch(b, 8192)
	sv := fromJSON(b, arrow.BinaryTypes.StringView, jsonList(func() []string {
		out := make([]string, rec.NumRows())
		for i := range out {
			out[i] = `"a string view value"`
		}
		return out
	}()))
	fields := append(rec.Schema().Fields(), arrow.Field{Name: "sv", Type: sv.DataType()})
	gathered := array.NewRecordBatch(arrow.NewSchema(fields, nil), append(rec.Columns(), sv), rec.NumRows())
	defer gathered.Release()
	for _, c := range []struct {
		name string
		rec  arrow.RecordBatch
	}{{"take", rec}, {"gathered", gathered}} {
		b.Run(c.name, func(b *testing.B) {
			var parts []int32
			for b.Loop() {
				var err error
				if parts, err = Assign(c.rec.Column(0), 16, parts); err != nil {
					b.Fatal(err)
				}
				out, err := Split(c.rec, parts, 16, nil)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range out {
					if r != nil {
						r.Release()
					}
				}
			}
		})
	}
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
