package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func batch(t testing.TB, mem memory.Allocator, lo, n int) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i := lo; i < lo+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%7 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append("row-" + string(rune('a'+i%26)))
		}
	}
	return b.NewRecordBatch()
}

func TestRoundTrip(t *testing.T) {
	for _, comp := range []string{LZ4, Zstd, None} {
		t.Run(comp, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer mem.AssertSize(t, 0)
			recs := []arrow.RecordBatch{batch(t, mem, 0, 100), batch(t, mem, 100, 50), batch(t, mem, 150, 1)}
			var buf bytes.Buffer
			st, err := Encode(&buf, recs[0].Schema(), recs, comp, mem)
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows != 151 || st.Bytes <= 0 {
				t.Fatalf("stats = %+v", st)
			}
			// Any Arrow IPC stream reader opens a frame behind the
			// stage's schema message.
			d, err := NewDecoder(recs[0].Schema())
			if err != nil {
				t.Fatal(err)
			}
			stream, err := d.Stream(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if got := CodecName(buf.Bytes()); got != comp {
				t.Fatalf("frame codec %q, want %q", got, comp)
			}
			r, err := ipc.NewReader(bytes.NewReader(stream), ipc.WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			var batches int
			var next int64
			for r.Next() {
				batches++
				col := r.RecordBatch().Column(0).(*array.Int64)
				for i := 0; i < col.Len(); i++ {
					if col.Value(i) != next {
						t.Fatalf("row %d: id %d", next, col.Value(i))
					}
					next++
				}
			}
			if r.Err() != nil || next != 151 {
				t.Fatalf("read %d rows, err %v", next, r.Err())
			}
			if batches != 1 {
				t.Fatalf("frame has %d batches, want small inputs coalesced into 1", batches)
			}
			r.Release()
			out, err := Decode(buf.Bytes(), recs[0].Schema(), mem)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out {
				o.Release()
			}
			for _, rec := range recs {
				rec.Release()
			}
		})
	}
}

func TestDecodeCorrupt(t *testing.T) {
	mem := memory.DefaultAllocator
	rec := batch(t, mem, 0, 10)
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := Encode(&buf, rec.Schema(), []arrow.RecordBatch{rec}, LZ4, mem); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for name, bad := range map[string][]byte{
		"truncated": b[:len(b)/2],
		"garbage":   []byte("not an arrow stream at all"),
		"empty":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			recs, err := Decode(bad, rec.Schema(), mem)
			for _, r := range recs {
				r.Release()
			}
			if !errors.Is(err, ErrCorrupt) && len(bad) > 0 {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestLogicalSizeOfSlice(t *testing.T) {
	rec := batch(t, memory.DefaultAllocator, 0, 1000)
	defer rec.Release()
	full := LogicalSize(rec)
	s := rec.NewSlice(0, 100)
	defer s.Release()
	if got := LogicalSize(s); got <= 0 || got > full/5 {
		t.Fatalf("slice of 10%% charged %d of %d bytes", got, full)
	}
}

func TestSchemaRoundTrip(t *testing.T) {
	rec := batch(t, memory.DefaultAllocator, 0, 1)
	defer rec.Release()
	b, err := EncodeSchema(rec.Schema())
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSchema(b)
	if err != nil || !s.Equal(rec.Schema()) {
		t.Fatalf("schema round trip: %v %v", s, err)
	}
}

// TestDecodeNullColumns round-trips columns of type null, alone and
// nested in a struct and a list: arrow-go's IPC reader loads null arrays
// without buffers, which its own validator rejects, so Decode gives them
// the one absent validity buffer their layout declares, leaking nothing.
func TestDecodeNullColumns(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "n", Type: arrow.Null, Nullable: true},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.Null, Nullable: true}), Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.Null), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i := range 5 {
		b.Field(0).(*array.Int32Builder).Append(int32(i))
		b.Field(1).(*array.NullBuilder).AppendNull()
		sb := b.Field(2).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.NullBuilder).AppendNull()
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.NullBuilder).AppendNulls(i)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	for _, comp := range []string{"none", "lz4", "zstd"} {
		var buf bytes.Buffer
		if _, err := Encode(&buf, schema, []arrow.RecordBatch{rec}, comp, mem); err != nil {
			t.Fatalf("%s: encode: %v", comp, err)
		}
		recs, err := Decode(buf.Bytes(), schema, mem)
		if err != nil {
			t.Fatalf("%s: decode: %v", comp, err)
		}
		if len(recs) != 1 || !array.RecordEqual(recs[0], rec) {
			t.Fatalf("%s: decoded %d batches, want the batch written", comp, len(recs))
		}
		for i, col := range recs[0].Columns() {
			if err := array.ValidateFull(col); err != nil {
				t.Errorf("%s: column %d: %v", comp, i, err)
			}
		}
		for _, r := range recs {
			r.Release()
		}
	}
}

// TestEncoderFrames encodes several frames with one Encoder, for a schema
// without dictionaries (one IPC writer for every frame) and one with a
// dictionary (a writer per frame, so each frame carries its dictionary):
// every frame decodes on its own, in any order, to the rows written.
func TestEncoderFrames(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	plain := batch(t, mem, 0, 40)
	defer plain.Release()
	bld := array.NewRecordBuilder(mem, fuzzWide)
	defer bld.Release()
	for i := range 30 {
		bld.Field(0).(*array.Int64Builder).Append(int64(i))
		bld.Field(1).(*array.StringBuilder).Append("v")
		bld.Field(2).AppendNull()
		bld.Field(3).AppendNull()
		bld.Field(4).(*array.BooleanBuilder).Append(i%3 == 0)
		if err := bld.Field(5).(*array.BinaryDictionaryBuilder).AppendString([]string{"a", "bb", "ccc"}[i%3]); err != nil {
			t.Fatal(err)
		}
	}
	dict := bld.NewRecordBatch()
	defer dict.Release()
	for _, rec := range []arrow.RecordBatch{plain, dict} {
		for _, comp := range []string{LZ4, Zstd, None} {
			enc, err := NewEncoder(rec.Schema(), comp, mem)
			if err != nil {
				t.Fatal(err)
			}
			var frames [][]byte
			for k := int64(0); k < 3; k++ {
				var buf bytes.Buffer
				piece := rec.NewSlice(k*10, k*10+10)
				if _, err := enc.Encode(&buf, []arrow.RecordBatch{piece}); err != nil {
					t.Fatal(err)
				}
				piece.Release()
				frames = append(frames, buf.Bytes())
			}
			enc.Close()
			for _, k := range []int64{2, 0, 1} {
				got, err := Decode(frames[k], rec.Schema(), mem)
				if err != nil {
					t.Fatalf("%s, %s frame %d: %v", rec.Schema().Field(rec.Schema().NumFields()-1).Name, comp, k, err)
				}
				want := rec.NewSlice(k*10, k*10+10)
				if len(got) != 1 || !array.RecordEqual(got[0], want) {
					t.Fatalf("%s frame %d: decoded %d batches that differ from rows [%d, %d)", comp, k, len(got), k*10, k*10+10)
				}
				want.Release()
				for _, g := range got {
					g.Release()
				}
			}
		}
	}
}

// TestDecodeHostileMetadataLength patches the first message's metadata
// length inside an uncompressed frame to 2 GiB.
func TestDecodeHostileMetadataLength(t *testing.T) {
	mem := memory.NewGoAllocator()
	rec := batch(t, mem, 0, 50)
	defer rec.Release()
	var buf bytes.Buffer
	if _, err := Encode(&buf, rec.Schema(), []arrow.RecordBatch{rec}, None, mem); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(buf.Bytes())
	copy(bad[HeaderSize+4:], []byte{0xff, 0xff, 0xff, 0x7f})
	if _, err := Decode(bad, rec.Schema(), mem); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "metadata length 2147483647") {
		t.Fatalf("err %v, want ErrCorrupt naming the metadata length", err)
	}
}

// TestSetCodecFramesInOneBuffer encodes frames back to back into one
// buffer with spare room, switching the encoder's codec between them (as
// compression auto does): each frame's header names its codec, and each
// decodes to its rows.
func TestSetCodecFramesInOneBuffer(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rec := batch(t, mem, 0, 2000)
	defer rec.Release()
	enc, err := NewEncoder(rec.Schema(), Auto, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var buf bytes.Buffer
	buf.Grow(1 << 20) // spare room the encoders may write into
	type span struct {
		codec, want string
		off, n      int
	}
	var spans []span
	for _, c := range append(Codecs, Codecs...) {
		if err := enc.SetCodec(c); err != nil {
			t.Fatal(err)
		}
		off := buf.Len()
		if _, err := enc.Encode(&buf, []arrow.RecordBatch{rec}); err != nil {
			t.Fatal(err)
		}
		want := c
		if c == ZstdFastest {
			want = Zstd
		}
		spans = append(spans, span{c, want, off, buf.Len() - off})
	}
	if err := enc.SetCodec("brotli"); err == nil {
		t.Fatal("SetCodec accepted brotli")
	}
	b := buf.Bytes()
	for _, s := range spans {
		f := b[s.off : s.off+s.n]
		if got := CodecName(f); got != s.want {
			t.Fatalf("frame set to %s has codec %q, want %q", s.codec, got, s.want)
		}
		recs, err := Decode(f, rec.Schema(), mem)
		if err != nil {
			t.Fatalf("decode frame set to %s: %v", s.codec, err)
		}
		if len(recs) != 1 || !array.RecordEqual(recs[0], rec) {
			t.Fatalf("frame set to %s decodes to other rows", s.codec)
		}
		for _, r := range recs {
			r.Release()
		}
	}
}

// TestDecodeAll: frames of several codecs decoded together give the rows
// of each in order, with no memory left behind; a corrupt frame among
// them fails the whole call with ErrCorrupt naming it.
func TestDecodeAll(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	var (
		frames [][]byte
		schema *arrow.Schema
		rows   int
	)
	for i, comp := range []string{None, LZ4, Zstd, None} {
		rec := batch(t, mem, rows, 10+i*7)
		rows += 10 + i*7
		schema = rec.Schema()
		var buf bytes.Buffer
		_, err := Encode(&buf, schema, []arrow.RecordBatch{rec}, comp, mem)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, buf.Bytes())
	}
	d, err := NewDecoder(schema)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := d.DecodeAll(frames, mem)
	if err != nil {
		t.Fatal(err)
	}
	var next int64
	for _, r := range recs {
		col := r.Column(0).(*array.Int64)
		for j := 0; j < col.Len(); j++ {
			if col.Value(j) != next {
				t.Fatalf("row %d: id %d", next, col.Value(j))
			}
			next++
		}
		r.Release()
	}
	if next != int64(rows) {
		t.Fatalf("DecodeAll gave %d rows, want %d", next, rows)
	}
	frames[2] = frames[2][:len(frames[2])-3]
	recs, err = d.DecodeAll(frames, mem)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "frame 3 of 4") || recs != nil {
		t.Fatalf("DecodeAll with frame 3 truncated = %d batches, %v; want ErrCorrupt naming frame 3 of 4", len(recs), err)
	}
}

// TestGrowTo: a buffer short of room grows to what it holds plus the
// room asked, rounded up to growStep when past it (not doubled), keeps
// its bytes; a small one grows to about the size asked; one with room
// enough is left alone.
func TestGrowTo(t *testing.T) {
	b := bytes.NewBuffer(make([]byte, 0, 1<<20))
	b.WriteString("head")
	GrowTo(b, 1<<20)
	if want := (4 + 1<<20 + growStep - 1) / growStep * growStep; b.Cap() != want || b.String() != "head" {
		t.Fatalf("capacity %d holding %q, want %d holding \"head\"", b.Cap(), b.String(), want)
	}
	before := b.Cap()
	GrowTo(b, 1000)
	if b.Cap() != before {
		t.Fatalf("a buffer with room grew from %d to %d", before, b.Cap())
	}
	small := new(bytes.Buffer)
	GrowTo(small, 5000)
	if small.Cap() < 5000 || small.Cap() > 5000+5000/8 {
		t.Fatalf("a 5000-byte frame's buffer has capacity %d, want about 5000, not a step of %d", small.Cap(), growStep)
	}
}
