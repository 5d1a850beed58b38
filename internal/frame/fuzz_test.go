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
func fuzzSeeds(f *testing.F) {
	f.Helper()
	mem := memory.NewGoAllocator()
	wide := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64}), Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}},
	}, nil)
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
			b := buf.Bytes()
			f.Add(b)
			f.Add(b[:len(b)/2])
			f.Add(b[:len(b)-8]) // no end-of-stream marker
			flipped := bytes.Clone(b)
			flipped[len(b)/3] ^= 0x5a
			f.Add(flipped)
		}
	}
	s, err := EncodeSchema(wide)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // a 2 GiB metadata length
	f.Add([]byte("ARROW1\x00\x00"))
}

// FuzzDecode feeds Decode arbitrary bytes: it must fail with ErrCorrupt or
// return batches that are valid Arrow data (so readers of the values do not
// panic), never panic itself, release every buffer, and allocate no more
// than decodeLimit of the frame's size.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := newPeakAllocator()
		schema, recs, err := Decode(b, mem)
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
		// The 8-byte uncompressed length that prefixes an LZ4 buffer.
		{"uncompressed size 1 TiB", le(400), le(1 << 40), "past its limit"},
		{"uncompressed size 300 MiB", le(400), le(300 << 20), "past its limit"},
		// The first message's metadata length, after the continuation marker.
		{"metadata length 2 GiB", frame[:8], append([]byte{0xff, 0xff, 0xff, 0xff}, 0xff, 0xff, 0xff, 0x7f), "metadata length 2147483647"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := bytes.Index(frame, tc.find)
			if i < 0 {
				t.Fatalf("%x not in the frame", tc.find)
			}
			bad := bytes.Clone(frame)
			copy(bad[i:], tc.put)
			pa := newPeakAllocator()
			_, _, err := Decode(bad, pa)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrCorrupt saying %q", err, tc.want)
			}
			if peak := pa.peak.Load(); peak > 1<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte frame", peak, len(bad))
			}
		})
	}
}
