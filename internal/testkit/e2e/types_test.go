package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle"
	"github.com/durashuffle/durashuffle/internal/testkit/testenv"
	"github.com/durashuffle/durashuffle/store"
)

// allTypes has every Arrow primitive type, strings and large strings,
// binaries, nested list, struct and map, a dictionary column and a
// column of type null, all nullable.
var allTypes = arrow.NewSchema([]arrow.Field{
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
	{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 4}, Nullable: true},
	{Name: "str", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "lstr", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "lbin", Type: arrow.BinaryTypes.LargeBinary, Nullable: true},
	{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 5}, Nullable: true},
	{Name: "list", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "struct", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
	{Name: "map", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Float64), Nullable: true},
	{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
	{Name: "null", Type: arrow.Null, Nullable: true},
}, nil)

// appendValue appends row i's value (or a null, one row in seven) to b.
func appendValue(b array.Builder, i int, r *rand.Rand) {
	if i%7 == 3 {
		b.AppendNull()
		return
	}
	word := fmt.Sprintf("v%d-%x", i, r.Uint32())
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(i%2 == 0)
	case *array.Int8Builder:
		b.Append(int8(i))
	case *array.Int16Builder:
		b.Append(int16(i))
	case *array.Int32Builder:
		b.Append(int32(i))
	case *array.Int64Builder:
		b.Append(int64(i) << 20)
	case *array.Uint8Builder:
		b.Append(uint8(i))
	case *array.Uint16Builder:
		b.Append(uint16(i))
	case *array.Uint32Builder:
		b.Append(uint32(i))
	case *array.Uint64Builder:
		b.Append(uint64(i) << 33)
	case *array.Float16Builder:
		b.Append(float16.New(float32(i % 1000)))
	case *array.Float32Builder:
		b.Append(float32(i) / 3)
	case *array.Float64Builder:
		b.Append(r.Float64())
	case *array.Date32Builder:
		b.Append(arrow.Date32(i % 30000))
	case *array.Date64Builder:
		b.Append(arrow.Date64(int64(i) * 86_400_000))
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(int64(i) * 1_000_003))
	case *array.Time32Builder:
		b.Append(arrow.Time32(i % 86_400_000))
	case *array.Time64Builder:
		b.Append(arrow.Time64(int64(i) * 999))
	case *array.DurationBuilder:
		b.Append(arrow.Duration(i))
	case *array.Decimal128Builder:
		b.Append(decimal128.FromI64(int64(i)*10007 - 5_000_000))
	case *array.StringBuilder:
		b.Append(word)
	case *array.LargeStringBuilder:
		b.Append(strings.Repeat(word, 1+i%3))
	case *array.BinaryBuilder:
		if b.Type().ID() == arrow.LARGE_BINARY {
			b.Append([]byte(word + word))
		} else {
			b.Append([]byte(word))
		}
	case *array.FixedSizeBinaryBuilder:
		b.Append([]byte(fmt.Sprintf("%05d", i%100000)))
	case *array.ListBuilder:
		b.Append(true)
		for j := range i % 4 {
			b.ValueBuilder().(*array.Int32Builder).Append(int32(i + j))
		}
	case *array.StructBuilder:
		b.Append(true)
		appendValue(b.FieldBuilder(0), i+1, r)
		appendValue(b.FieldBuilder(1), i+2, r)
	case *array.MapBuilder:
		b.Append(true)
		for j := range i % 3 {
			b.KeyBuilder().(*array.StringBuilder).Append(fmt.Sprintf("k%d", j))
			b.ItemBuilder().(*array.Float64Builder).Append(float64(i * j))
		}
	case *array.BinaryDictionaryBuilder:
		b.AppendString([]string{"red", "green", "blue", "a longer dictionary value"}[i%4])
	case *array.NullBuilder:
		b.AppendNull() // a column of type null holds nothing else
	default:
		panic(fmt.Sprintf("no generator for %T", b))
	}
}

func typedBatch(lo, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, allTypes)
	defer b.Release()
	for i := lo; i < lo+n; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 11))
		for _, f := range b.Fields() {
			appendValue(f, i, r)
		}
	}
	return b.NewRecordBatch()
}

// rowsOf renders every row as text, column by column.
func rowsOf(recs ...arrow.RecordBatch) []string {
	var out []string
	for _, rec := range recs {
		for i := range int(rec.NumRows()) {
			var sb strings.Builder
			for _, c := range rec.Columns() {
				sb.WriteString(c.ValueStr(i))
				sb.WriteByte('|')
			}
			out = append(out, sb.String())
		}
	}
	return out
}

// TestEveryTypeRoundTrips writes every Arrow type through frames that
// straddle part boundaries into several parts and several objects, then
// reads each partition back, including an empty one.
func TestEveryTypeRoundTrips(t *testing.T) {
	forEach(t, func(t *testing.T, st store.Store, counter *store.Counter) {
		ctx := context.Background()
		cfg := testConfig()
		cfg.Write.MaxObjectSize = 12 * durashuffle.MiB // several objects
		cfg.Write.FrameTargetBytes = 512 * durashuffle.KiB
		c := testenv.Client(t, cfg, durashuffle.WithStore(st), durashuffle.WithCounter(counter))
		defer c.Close()
		const partitions = 4 // partition 3 stays empty
		w, err := c.NewWriter(ctx, durashuffle.WriterOptions{Query: "types", Worker: "0", Partitions: partitions, Schema: allTypes})
		if err != nil {
			t.Fatal(err)
		}
		want := make([][]string, partitions)
		for lo := 0; lo < 150_000; lo += 1000 {
			rec := typedBatch(lo, 1000)
			p := (lo / 1000) % 3
			if err := w.Write(p, rec); err != nil {
				t.Fatal(err)
			}
			want[p] = append(want[p], rowsOf(rec)...)
			rec.Release()
		}
		m, err := w.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Objects) < 2 || m.Totals.Parts < 4 {
			t.Fatalf("%d objects, %d parts: want the data to span several of each", len(m.Objects), m.Totals.Parts)
		}
		straddling := 0
		for _, f := range m.Frames {
			if f.Offset/int64(cfg.Write.ChunkSize) != (f.Offset+f.Length-1)/int64(cfg.Write.ChunkSize) {
				straddling++
			}
		}
		if straddling == 0 {
			t.Fatal("no frame straddles a part boundary: the test proves less than it says")
		}
		if _, err := c.Seal(ctx, "types", 0, 1); err != nil {
			t.Fatal(err)
		}
		stage, err := c.OpenStage(ctx, "types", 0)
		if err != nil {
			t.Fatal(err)
		}
		for p := range partitions {
			rr, err := stage.ReadPartitions(ctx, []int{p})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for rr.Next() {
				if !rr.Schema().Equal(allTypes) {
					t.Fatalf("schema changed: %s", rr.Schema())
				}
				got = append(got, rowsOf(rr.RecordBatch())...)
			}
			if err := rr.Err(); err != nil {
				t.Fatal(err)
			}
			rr.Release()
			if len(got) != len(want[p]) {
				t.Fatalf("partition %d: %d rows back, %d written", p, len(got), len(want[p]))
			}
			for i := range got {
				if got[i] != want[p][i] {
					t.Fatalf("partition %d row %d:\n got  %s\n want %s", p, i, got[i], want[p][i])
				}
			}
		}
		t.Logf("%d rows of %d types in %d frames (%d straddling parts), %d parts, %d objects",
			m.Totals.Rows, len(allTypes.Fields()), len(m.Frames), straddling, m.Totals.Parts, len(m.Objects))
	})
}
