package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// peakAllocator tracks the bytes allocated through it, to prove a hostile
// frame cannot make Decode allocate more than its bound.
type peakAllocator struct {
	mem       *memory.CheckedAllocator
	cur, peak atomic.Int64
}

func newPeakAllocator() *peakAllocator {
	return &peakAllocator{mem: memory.NewCheckedAllocator(memory.NewGoAllocator())}
}

func (p *peakAllocator) grow(n int64) {
	c := p.cur.Add(n)
	for {
		old := p.peak.Load()
		if c <= old || p.peak.CompareAndSwap(old, c) {
			return
		}
	}
}

func (p *peakAllocator) Allocate(size int) []byte {
	p.grow(int64(size))
	return p.mem.Allocate(size)
}

func (p *peakAllocator) Reallocate(size int, b []byte) []byte {
	p.grow(int64(size - len(b)))
	return p.mem.Reallocate(size, b)
}

func (p *peakAllocator) Free(b []byte) {
	p.cur.Add(-int64(len(b)))
	p.mem.Free(b)
}

// fuzzSeeds are valid frames of several shapes and compressions, and
// damaged versions of them.
// fuzzWide is the wide schema of the fuzz seeds; fuzzSchemas are the
// schemas a fuzz input's first byte picks for the frame in its other bytes.
var fuzzWide = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64}), Nullable: true},
	{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}},
}, nil)

func fuzzSchemas(tb testing.TB) []*arrow.Schema {
	simple := batch(tb, memory.NewGoAllocator(), 0, 1)
	defer simple.Release()
	return []*arrow.Schema{simple.Schema(), fuzzWide}
}

func fuzzSeeds(f *testing.F) {
	f.Helper()
	mem := memory.NewGoAllocator()
	wide := fuzzWide
	bld := array.NewRecordBuilder(mem, wide)
	for i := range 20 {
		bld.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%5 == 0 {
			bld.Field(1).AppendNull()
			bld.Field(2).AppendNull()
			bld.Field(3).AppendNull()
		} else {
			bld.Field(1).(*array.StringBuilder).Append("value")
			lb := bld.Field(2).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(i))
			sb := bld.Field(3).(*array.StructBuilder)
			sb.Append(true)
			sb.FieldBuilder(0).(*array.Float64Builder).Append(float64(i) / 3)
		}
		bld.Field(4).(*array.BooleanBuilder).Append(i%2 == 0)
		if err := bld.Field(5).(*array.BinaryDictionaryBuilder).AppendString([]string{"a", "bb", "ccc"}[i%3]); err != nil {
			f.Fatal(err)
		}
	}
	wideRec := bld.NewRecordBatch()
	bld.Release()
	defer wideRec.Release()
	simple := batch(f, mem, 0, 50)
	defer simple.Release()

	for _, comp := range []string{LZ4, Zstd, None} {
		for _, recs := range [][]arrow.RecordBatch{{simple}, {wideRec}, {simple, simple}} {
			var buf bytes.Buffer
			if _, err := Encode(&buf, recs[0].Schema(), recs, comp, mem); err != nil {
				f.Fatal(err)
			}
			pick := byte(0)
			if recs[0].Schema().Equal(wide) {
				pick = 1
			}
			b := append([]byte{pick}, buf.Bytes()...)
			f.Add(b)
			f.Add(b[:len(b)/2])
			f.Add(b[:len(b)-8])
			flipped := bytes.Clone(b)
			flipped[len(b)/3] ^= 0x5a
			f.Add(flipped)
			if stream, err := mustDecoder(f, recs[0].Schema()).Stream(buf.Bytes()); err == nil {
				f.Add(append([]byte{pick}, stream...)) // a whole IPC stream is not a frame
			}
		}
	}
	s, err := EncodeSchema(wide)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s)
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})                                     // lz4 claiming 4 GiB
	f.Add([]byte{1, 0, 0, 0, 0, 8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // a 2 GiB metadata length
	f.Add([]byte("ARROW1\x00\x00"))
}

func mustDecoder(tb testing.TB, schema *arrow.Schema) *Decoder {
	tb.Helper()
	d, err := NewDecoder(schema)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// FuzzDecode feeds Decode arbitrary bytes: it must fail with ErrCorrupt or
// return batches that are valid Arrow data (so readers of the values do not
// panic), never panic itself, release every buffer, and allocate no more
// than decodeLimit of the frame's size.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	schemas := fuzzSchemas(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		schema, b := schemas[int(in[0])%len(schemas)], in[1:]
		mem := newPeakAllocator()
		recs, err := Decode(b, schema, mem)
		if peak, limit := mem.peak.Load(), decodeLimit(len(b)); peak > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes, limit %d", len(b), peak, limit)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			// No leak check here: arrow-go's reader recovers its own
			// panics without releasing the buffers it had allocated. With
			// Go's allocator (durashuffle's) the GC reclaims them.
			return
		}
		for _, rec := range recs {
			if !rec.Schema().Equal(schema) {
				t.Fatalf("batch schema %s, stream schema %s", rec.Schema(), schema)
			}
			for i, col := range rec.Columns() {
				if err := validate(col); err != nil {
					t.Fatalf("column %d of a decoded batch is invalid: %v", i, err)
				}
				// What the CLI's csv and jsonl output do with every value
				// (the first and last rows: a null column can claim
				// millions at no cost).
				for r := 0; r < col.Len(); r++ {
					if r == 2048 && col.Len() > 4096 {
						r = col.Len() - 2048
					}
					_ = col.ValueStr(r)
				}
			}
			rec.Release()
		}
		mem.mem.AssertSize(t, 0)
	})
}

// FuzzDecodeSchema feeds DecodeSchema (the schema bytes of a manifest)
// arbitrary bytes: an error or a schema, never a panic.
func FuzzDecodeSchema(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSchema(b)
		if err == nil && s == nil {
			t.Fatal("no schema and no error")
		}
	})
}

// TestDecodeHostileLengths patches lengths inside a valid frame to huge
// values: Decode must refuse them without allocating them.
func TestDecodeHostileLengths(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := batch(t, mem, 0, 50) // 50 int64 ids: a 400-byte values buffer
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := Encode(&buf, rec.Schema(), []arrow.RecordBatch{rec}, LZ4, mem); err != nil {
		t.Fatal(err)
	}
	frame := buf.Bytes()
	le := func(v uint64) []byte {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		return b[:]
	}
	for _, tc := range []struct {
		name      string
		find, put []byte
		want      string
	}{
		// The frame header's decompressed length.
		{"decompressed size 4 GiB", frame[:8], append([]byte{1, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff), "past its limit"},
		{"decompressed size 300 MiB", frame[:8], append([]byte{1, 0, 0, 0}, le(300 << 20)[:4]...), "past its limit"},
		{"unknown codec", frame[:1], []byte{9}, "unknown frame codec 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := bytes.Index(frame, tc.find)
			if i < 0 {
				t.Fatalf("%x not in the frame", tc.find)
			}
			bad := bytes.Clone(frame)
			copy(bad[i:], tc.put)
			pa := newPeakAllocator()
			_, err := Decode(bad, rec.Schema(), pa)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrCorrupt saying %q", err, tc.want)
			}
			if peak := pa.peak.Load(); peak > 1<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte frame", peak, len(bad))
			}
		})
	}
}
