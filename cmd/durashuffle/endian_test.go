package main

import (
	"bytes"
	"encoding/binary"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/durashuffle/durashuffle/internal/testkit/arrowcorpus"
)

// readInPlace decodes an Arrow IPC file or stream in native byte order
// with arrow-go without swapping it (the schema keeps the order it
// declares): the arrays hold slices of b (see sliceMessages; a file is
// read as the stream of messages it holds after its magic).
func readInPlace(t *testing.T, b []byte) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	var recs []arrow.RecordBatch
	t.Cleanup(func() {
		for _, r := range recs {
			r.Release()
		}
	})
	start := 0
	if bytes.HasPrefix(b, []byte(arrowFileMagic)) {
		start = 8 // the magic, padded
	}
	rd, err := ipc.NewReaderFromMessageReader(&sliceMessages{b: b, pos: start}, ipc.WithEnsureNativeEndian(false))
	if err != nil {
		t.Fatalf("not an Arrow IPC stream: %v", err)
	}
	defer rd.Release()
	for rd.Next() {
		r := rd.RecordBatch()
		r.Retain()
		recs = append(recs, r)
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return rd.Schema(), recs
}

// sliceMessages reads the messages of an IPC stream in memory without
// copying them: the arrays arrow-go decodes from them hold slices of b
// (uncompressed buffers), so a buffer's place in b is known.
type sliceMessages struct {
	b   []byte
	pos int
}

func (m *sliceMessages) Message() (*ipc.Message, error) {
	b := m.b[m.pos:]
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != 0xFFFFFFFF {
		return nil, io.EOF // also the end-of-stream marker's short form
	}
	n := int(binary.LittleEndian.Uint32(b[4:]))
	if n == 0 {
		return nil, io.EOF
	}
	meta := memory.NewBufferBytes(b[8 : 8+n])
	head := ipc.NewMessage(meta, memory.NewBufferBytes(nil))
	body := int(head.BodyLen())
	head.Release()
	msg := ipc.NewMessage(meta, memory.NewBufferBytes(b[8+n:8+n+body]))
	m.pos += 8 + n + body
	return msg, nil
}

func (m *sliceMessages) Retain()  {}
func (m *sliceMessages) Release() {}

// bigEndianBytes writes cs as an Arrow IPC stream (file: an IPC file)
// whose schema says big-endian, then swaps every buffer of every batch
// and dictionary in place in those bytes with arrowipc.SwapEndian: the
// result is the IPC a big-endian machine writes. (arrow-go's writer
// records the schema's byte order in the schema message and the file's
// footer, but writes only native data: it reads offsets to slice
// buffers.) It returns the bytes and how many swapped buffers differ
// from the native ones, and fails if a buffer to swap is not found in
// the bytes.
func bigEndianBytes(t *testing.T, cs arrowcorpus.Case, file bool) ([]byte, int) {
	t.Helper()
	be := cs.Schema.WithEndianness(endian.BigEndian)
	var buf bytes.Buffer
	var w interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	if file {
		fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(be))
		if err != nil {
			t.Fatal(err)
		}
		w = fw
	} else {
		w = ipc.NewWriter(&buf, ipc.WithSchema(be))
	}
	for i, b := range cs.Batches {
		rec := array.NewRecordBatch(be, b.Columns(), b.NumRows())
		err := writeIPC(w, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("%s: batch %d: %v", cs.Name, i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	native := buf.Bytes()
	sc, recs := readInPlace(t, native)
	if sc.Endianness() != endian.BigEndian {
		t.Fatalf("arrow-go wrote the schema as %s, want big-endian", sc.Endianness())
	}
	out := bytes.Clone(native)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(native)))
	differ := 0
	var place func(orig, swapped arrow.ArrayData)
	place = func(orig, swapped arrow.ArrayData) {
		for i, b := range orig.Buffers() {
			s := swapped.Buffers()[i]
			if b == nil || s == b || b.Len() == 0 {
				continue
			}
			at := int(uintptr(unsafe.Pointer(unsafe.SliceData(b.Bytes()))) - base)
			if at < 0 || at+b.Len() > len(native) {
				t.Fatalf("%s: a %s buffer is not in the IPC bytes", cs.Name, orig.DataType())
			}
			copy(out[at:], s.Bytes()[:b.Len()])
			if !bytes.Equal(s.Bytes()[:b.Len()], b.Bytes()) {
				differ++
			}
		}
		for i, c := range orig.Children() {
			place(c, swapped.Children()[i])
		}
		if d := orig.Dictionary(); d != nil && d.(*array.Data) != nil {
			place(d, swapped.Dictionary())
		}
	}
	for _, r := range recs {
		for _, c := range r.Columns() {
			s, err := arrowipc.SwapEndian(c.Data(), endian.LittleEndian, memory.DefaultAllocator)
			if err != nil {
				t.Fatalf("%s: %v", cs.Name, err)
			}
			place(c.Data(), s)
			s.Release()
		}
	}
	return out, differ
}

// hasViews says whether sc holds a type arrow-go's own byte-order swapping
// does not swap (it leaves them as they are, its error ignored).
func hasViews(sc *arrow.Schema) bool {
	for _, f := range sc.Fields() {
		if arrowcorpus.Has(f.Type, arrow.STRING_VIEW, arrow.BINARY_VIEW, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.RUN_END_ENCODED) {
			return true
		}
	}
	return false
}

// readSwapped decodes an Arrow IPC file or stream as write -i does:
// through arrowipc.NativeMessages (a file as the messages between its
// magic and its footer).
func readSwapped(t *testing.T, b []byte) (*arrow.Schema, []arrow.RecordBatch) {
	t.Helper()
	msgs := b
	if bytes.HasPrefix(b, []byte(arrowFileMagic)) {
		footer := int(binary.LittleEndian.Uint32(b[len(b)-10:]))
		msgs = b[8 : len(b)-10-footer]
	}
	rd, err := ipc.NewReaderFromMessageReader(arrowipc.NativeMessages(bytes.NewReader(msgs)), ipc.WithEnsureNativeEndian(false))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Release()
	var recs []arrow.RecordBatch
	for rd.Next() {
		r := rd.RecordBatch()
		r.Retain()
		recs = append(recs, r)
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range recs {
			r.Release()
		}
	})
	return rd.Schema(), recs
}

// TestEndianSwapMatchesArrowGo: for Arrow C++'s big-endian integration
// files, arrowipc.NativeMessages gives, batch by batch, the values
// arrow-go's own swapping (WithEnsureNativeEndian(true)) reads.
func TestEndianSwapMatchesArrowGo(t *testing.T) {
	files, err := filepath.Glob("testdata/bigendian/*.arrow_file")
	streams, serr := filepath.Glob("testdata/bigendian/*.stream")
	files = append(files, streams...)
	if err != nil || serr != nil || len(files) < 20 {
		t.Fatalf("%d files in testdata/bigendian: %v %v", len(files), err, serr)
	}
	batches := 0
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		wantSchema, want := readIPC(t, b)
		sc, got := readSwapped(t, b)
		if sc.Endianness() != endian.BigEndian {
			t.Fatalf("%s is %s", path, sc.Endianness())
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d batches, arrow-go reads %d", path, len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			if !array.RecordEqual(want[i], got[i]) {
				t.Errorf("%s batch %d: swapped %v, arrow-go reads %v", path, i, got[i], want[i])
			}
		}
		batches += len(got)
		if err := arrowcorpus.Diff(wantSchema, want, sc, got); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if batches < 20 {
		t.Errorf("%d batches compared, want at least 20", batches)
	}
}

// TestBigEndianCorpusThroughCLI writes every case of the type corpus as
// big-endian IPC (a stream, and a file where arrow-go's file writer can
// write the case) with write -i, seals it and reads it back with read
// --format arrow: the values are the case's. The big-endian bytes differ
// from the native ones, and, for the types arrow-go swaps itself, arrow-go
// reads from them the case's values: the test would fail with a swapper
// that does nothing.
func TestBigEndianCorpusThroughCLI(t *testing.T) {
	tg := newTarget(t, backends[0])
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	for _, cs := range cases {
		t.Run(cs.Name, func(t *testing.T) {
			kinds := []string{"stream"}
			if !cs.Replaces {
				kinds = append(kinds, "file")
			}
			for _, kind := range kinds {
				b, differ := bigEndianBytes(t, cs, kind == "file")
				if cs.Rows() > 0 && cs.Name != "bool" && differ == 0 {
					t.Fatalf("%s: no buffer's bytes changed when swapped to big-endian", kind)
				}
				if e := fileEndianness(t, b); e != endian.BigEndian {
					t.Fatalf("%s is %s", kind, e)
				}
				if !hasViews(cs.Schema) {
					sc, got := readIPC(t, b)
					if err := arrowcorpus.Diff(cs.Schema, cs.Batches, sc, got); err != nil {
						t.Errorf("%s: arrow-go's swapping of the big-endian bytes: %v", kind, err)
					}
				}
				path := filepath.Join(t.TempDir(), cs.Name+"."+kind)
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				q := "be-corpus-" + strings.ReplaceAll(cs.Name, "_", "-") + "-" + kind
				var ws writeSummary
				tg.run(t, nil, "write", "--json", "-q", q, "-s", "0", "-w", "0", "--partitions", "1", "-i", path).must(t).decode(t, &ws)
				if ws.Rows != cs.Rows() || ws.InputFormat != kind {
					t.Fatalf("%s: write: %d rows from a %s, want %d", kind, ws.Rows, ws.InputFormat, cs.Rows())
				}
				tg.run(t, nil, "seal", "-q", q, "-s", "0", "--workers", "1").must(t)
				out := tg.run(t, nil, "read", "-q", q, "-s", "0").must(t)
				sc, got := readIPC(t, []byte(out.stdout))
				if err := arrowcorpus.Diff(cs.Schema, cs.Batches, sc, got); err != nil {
					t.Errorf("%s: read back: %v", kind, err)
				}
			}
		})
	}
	plain := 0
	for _, cs := range cases {
		if !hasViews(cs.Schema) {
			plain++
		}
	}
	if plain < 15 {
		t.Errorf("%d cases cross-checked with arrow-go's swapping, want at least 15", plain)
	}
}

// TestBigEndianHostileView: a big-endian string view whose offset, once
// swapped, points past its data buffer is refused by write -i with an
// error naming the column, and nothing is committed.
func TestBigEndianHostileView(t *testing.T) {
	tg := newTarget(t, backends[0])
	sc := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.BinaryTypes.StringView, Nullable: true}}, nil)
	views := make([]byte, 32)
	binary.LittleEndian.PutUint32(views[0:], 3)
	copy(views[4:], "abc")
	binary.LittleEndian.PutUint32(views[16:], 20) // out of line: 20 bytes
	copy(views[20:], "long")
	binary.LittleEndian.PutUint32(views[24:], 0)    // buffer 0
	binary.LittleEndian.PutUint32(views[28:], 1000) // at 1000, past its 24 bytes
	d := array.NewData(sc.Field(0).Type, 2, []*memory.Buffer{nil, memory.NewBufferBytes(views), memory.NewBufferBytes([]byte("long string of 24 bytes."))}, nil, 0, 0)
	col := array.MakeFromData(d)
	d.Release()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, 2)
	col.Release()
	cs := arrowcorpus.Case{Name: "hostile_view", Schema: sc, Batches: []arrow.RecordBatch{rec}}
	defer cs.Release()
	b, differ := bigEndianBytes(t, cs, false)
	if differ == 0 {
		t.Fatal("the views did not change when swapped")
	}
	r := tg.run(t, b, "write", "-q", "hostile-be-view", "-s", "0", "-w", "0", "--partitions", "1", "-i", "-")
	if r.code != 1 || !strings.Contains(r.stderr, `column 0 "v"`) || strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("exit %d, want 1 and an error naming column 0 \"v\":\n%s", r.code, r.stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(r.stderr))
	if ls := tg.run(t, nil, "ls", "--query", "hostile-be-view").must(t).stdout; !strings.Contains(ls, "no committed stages") {
		t.Errorf("after the refused write: %s", ls)
	}
}

// TestBigEndianCompressed: compressed (LZ4 frame, zstd) IPC streams and
// files declared big-endian are swapped by arrowipc.NativeMessages as
// arrow-go's own swapping swaps them. The bytes are arrow-go's native
// ones, so both read values other than the case's (checked): fixed-width
// types only, whose every byte pattern is a value.
func TestBigEndianCompressed(t *testing.T) {
	cases := arrowcorpus.Cases(memory.DefaultAllocator)
	defer arrowcorpus.Release(cases)
	n := 0
	for _, cs := range cases {
		switch cs.Name {
		case "integers", "floats", "decimals", "temporal", "intervals":
		default:
			continue
		}
		be := cs.Schema.WithEndianness(endian.BigEndian)
		for _, codec := range []ipc.Option{ipc.WithLZ4(), ipc.WithZstd()} {
			for _, file := range []bool{false, true} {
				var buf bytes.Buffer
				var w interface {
					Write(arrow.RecordBatch) error
					Close() error
				}
				if file {
					fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(be), codec)
					if err != nil {
						t.Fatal(err)
					}
					w = fw
				} else {
					w = ipc.NewWriter(&buf, ipc.WithSchema(be), codec)
				}
				for _, b := range cs.Batches {
					rec := array.NewRecordBatch(be, b.Columns(), b.NumRows())
					if err := w.Write(rec); err != nil {
						t.Fatal(err)
					}
					rec.Release()
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				wantSchema, want := readIPC(t, buf.Bytes())
				sc, got := readSwapped(t, buf.Bytes())
				if err := arrowcorpus.Diff(wantSchema, want, sc, got); err != nil {
					t.Errorf("%s (file %v): %v", cs.Name, file, err)
				}
				if err := arrowcorpus.Diff(cs.Schema, cs.Batches, sc, got); err == nil || !strings.Contains(err.Error(), "row ") {
					t.Errorf("%s (file %v): the values were not swapped", cs.Name, file)
				}
				n++
			}
		}
	}
	if n != 20 {
		t.Errorf("%d inputs, want 20", n)
	}
}

// TestBigEndianDeltaDictionary: a stream declared big-endian whose
// dictionary grows by delta dictionary batches is swapped by
// arrowipc.NativeMessages as arrow-go's own swapping swaps it (each
// delta swapped before arrow-go joins it to the dictionary). The bytes
// are arrow-go's native ones: both read other values than written
// (checked): int64 values, whose every byte pattern is a value, and int8
// indices, which stay in range.
func TestBigEndianDeltaDictionary(t *testing.T) {
	mem := memory.DefaultAllocator
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.PrimitiveTypes.Int64}
	sc := arrow.NewSchema([]arrow.Field{{Name: "d", Type: dt, Nullable: true}}, nil).WithEndianness(endian.BigEndian)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithDictionaryDeltas(true))
	var written []arrow.RecordBatch
	for _, step := range [][2]string{{`[1, 2]`, `[0, 1, 0]`}, {`[1, 2, 3]`, `[2, 1]`}, {`[1, 2, 3, 4, 5]`, `[4, 3, 0]`}} {
		vals, _, err := array.FromJSON(mem, arrow.PrimitiveTypes.Int64, strings.NewReader(step[0]))
		if err != nil {
			t.Fatal(err)
		}
		idx, _, err := array.FromJSON(mem, arrow.PrimitiveTypes.Int8, strings.NewReader(step[1]))
		if err != nil {
			t.Fatal(err)
		}
		col := array.NewDictionaryArray(dt, idx, vals)
		rec := array.NewRecordBatch(sc, []arrow.Array{col}, int64(col.Len()))
		vals.Release()
		idx.Release()
		col.Release()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		written = append(written, rec)
	}
	defer func() {
		for _, r := range written {
			r.Release()
		}
	}()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The stream holds delta dictionary batches: arrow-go writes one
	// dictionary message for each batch after the first.
	msgs := ipc.NewMessageReader(bytes.NewReader(buf.Bytes()))
	dicts := 0
	for {
		m, err := msgs.Message()
		if err != nil {
			break
		}
		if m.Type() == ipc.MessageDictionaryBatch {
			dicts++
		}
	}
	msgs.Release()
	if dicts != 3 {
		t.Fatalf("%d dictionary batches in the stream, want 3 (one, then two deltas)", dicts)
	}
	wantSchema, want := readIPC(t, buf.Bytes())
	gotSchema, got := readSwapped(t, buf.Bytes())
	if err := arrowcorpus.Diff(wantSchema, want, gotSchema, got); err != nil {
		t.Errorf("swapped: %v", err)
	}
	if err := arrowcorpus.Diff(sc, written, gotSchema, got); err == nil || !strings.Contains(err.Error(), "row 0") {
		t.Errorf("the values were not swapped: %v", err)
	}
}
