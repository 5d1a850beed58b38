// Package frame encodes and decodes durashuffle frames. A frame holds
// rows of one partition: an 8-byte header, then Arrow IPC messages (any
// dictionary batches, then one record batch; no schema message, no
// end-of-stream marker) compressed as one block. The stage's schema is
// stored once, in the manifest: the schema message followed by a frame's
// decompressed messages is a standard Arrow IPC stream.
package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression names accepted by Encode, as in the manifest and config.
const (
	LZ4  = "lz4"
	Zstd = "zstd"
	None = "none"
	// Auto is a writer's choice per frame among Codecs (see
	// Encoder.SetCodec); each frame's header names its own codec.
	Auto = "auto"
	// ZstdFastest is zstd at its fastest level: a codec an Encoder can
	// be set to, stored as zstd (the decoder does not care for levels).
	ZstdFastest = "zstd-fastest"
)

// Codecs are the codecs an Encoder can be set to, cheapest first: each
// costs more CPU per byte than the one before and (on typical rows)
// stores fewer bytes.
var Codecs = []string{None, LZ4, ZstdFastest, Zstd}

// The frame header: byte 0 is the codec of the payload, bytes 1 to 3 are
// zero, bytes 4 to 7 are the payload's decompressed length (uint32, little
// endian). The payload follows: the IPC messages as they are (codecNone),
// one LZ4 block (codecLZ4, the block format without frame framing), or
// one zstd frame (codecZstd).
const (
	HeaderSize = 8

	codecNone byte = 0
	codecLZ4  byte = 1
	codecZstd byte = 2
)

// maxPayload is the largest decompressed frame the header can describe.
const maxPayload = 1<<32 - 1

// Stats describes an encoded frame.
type Stats struct {
	Rows  int64
	Bytes int64 // uncompressed Arrow buffer bytes of the rows
}

// CodecName returns the compression name of the frame in b ("lz4",
// "zstd", "none"), or "" when b has no valid header.
func CodecName(b []byte) string {
	if len(b) < HeaderSize {
		return ""
	}
	switch b[0] {
	case codecNone:
		return None
	case codecLZ4:
		return LZ4
	case codecZstd:
		return Zstd
	}
	return ""
}

// Encoder encodes frames of one schema. It keeps its IPC writer, its
// scratch buffer and its compressor from frame to frame, so a frame of a
// few rows pays for its rows, not for setting up an encoder: the schema
// is written once per stage (in the manifest), never per frame. Not safe
// for concurrent use: one per encoding goroutine.
type Encoder struct {
	schema      *arrow.Schema
	compression string
	mem         memory.Allocator
	schemaMsg   []byte // the schema message the IPC writer writes first

	// A schema with dictionaries gets a fresh IPC writer per frame, so
	// that every frame carries the dictionaries its rows use; otherwise
	// one writer serves every frame.
	fresh   bool
	ipcw    *ipc.Writer
	sink    switchWriter
	scratch bytes.Buffer
	lz      lz4.Compressor
	zs      *zstd.Encoder // at the default level
	zfast   *zstd.Encoder // at the fastest level
}

// switchWriter lets one IPC writer write each frame into its own buffer.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) { return s.w.Write(p) }

// NewEncoder returns an encoder of frames of schema with compression
// ("lz4", "zstd" or "none"); mem allocates the concatenated batches.
func NewEncoder(schema *arrow.Schema, compression string, mem memory.Allocator) (*Encoder, error) {
	switch compression {
	case LZ4, Zstd, None, ZstdFastest:
	case Auto:
		compression = LZ4 // until SetCodec says otherwise
	case "":
		compression = None
	default:
		return nil, fmt.Errorf("frame compression %q: want lz4, zstd or none", compression)
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	msg, err := schemaMessage(schema)
	if err != nil {
		return nil, err
	}
	e := &Encoder{schema: schema, mem: mem, schemaMsg: msg, fresh: hasDictionary(schema.Fields())}
	if err := e.SetCodec(compression); err != nil {
		return nil, err
	}
	return e, nil
}

// SetCodec sets the codec of the frames encoded from now on: one of
// Codecs. A zstd encoder is made on first use of its level.
func (e *Encoder) SetCodec(codec string) error {
	var err error
	switch codec {
	case None, LZ4:
	case Zstd:
		if e.zs == nil {
			e.zs, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		}
	case ZstdFastest:
		if e.zfast == nil {
			e.zfast, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		}
	default:
		return fmt.Errorf("frame codec %q: want one of %v", codec, Codecs)
	}
	if err != nil {
		return fmt.Errorf("zstd encoder: %w", err)
	}
	e.compression = codec
	return nil
}

// Close releases the encoder's resources.
func (e *Encoder) Close() {
	if e.ipcw != nil {
		e.ipcw.Close()
		e.ipcw = nil
	}
	if e.zs != nil {
		e.zs.Close()
		e.zs = nil
	}
	if e.zfast != nil {
		e.zfast.Close()
		e.zfast = nil
	}
}

// Encode appends one frame holding recs (all of the encoder's schema) to
// buf. Several small batches are concatenated into one record batch
// first: one batch per frame keeps per-batch metadata from growing with
// the number of inputs.
func (e *Encoder) Encode(buf *bytes.Buffer, recs []arrow.RecordBatch) (Stats, error) {
	batches := recs
	if len(recs) > 1 {
		if merged, err := Concat(e.schema, recs, e.mem); err == nil {
			defer merged.Release()
			batches = []arrow.RecordBatch{merged}
		}
		// Columns that cannot be concatenated (rare dictionary cases) are
		// written as separate batches of the same frame.
	}
	e.scratch.Reset()
	e.sink.w = &e.scratch
	strip := e.ipcw == nil
	if strip {
		e.ipcw = ipc.NewWriter(&e.sink, ipc.WithSchema(e.schema), ipc.WithAllocator(e.mem))
	}
	var st Stats
	for _, r := range batches {
		if err := e.ipcw.Write(r); err != nil {
			e.ipcw.Close()
			e.ipcw = nil
			return Stats{}, fmt.Errorf("encode frame of %d rows: %w", r.NumRows(), err)
		}
		st.Rows += r.NumRows()
		st.Bytes += LogicalSize(r)
	}
	if e.fresh {
		// Closing writes the end-of-stream marker into scratch: drop it.
		e.sink.w = io.Discard
		e.ipcw.Close()
		e.ipcw = nil
	}
	msgs := e.scratch.Bytes()
	if strip {
		if !bytes.HasPrefix(msgs, e.schemaMsg) {
			return Stats{}, fmt.Errorf("encode frame: the IPC writer's schema message differs from the stage's (%d bytes)", len(e.schemaMsg))
		}
		msgs = msgs[len(e.schemaMsg):]
	}
	if len(msgs) > maxPayload {
		return Stats{}, fmt.Errorf("encode frame of %d rows: %d bytes of IPC messages, more than a frame holds (%d)", st.Rows, len(msgs), maxPayload)
	}
	e.compress(buf, msgs)
	return st, nil
}

// compress appends the header and msgs, compressed when that saves bytes.
func (e *Encoder) compress(buf *bytes.Buffer, msgs []byte) {
	var hdr [HeaderSize]byte
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(msgs)))
	switch e.compression {
	case LZ4:
		buf.Grow(HeaderSize + lz4.CompressBlockBound(len(msgs)))
		dst := buf.AvailableBuffer()[:HeaderSize+lz4.CompressBlockBound(len(msgs))]
		n, err := e.lz.CompressBlock(msgs, dst[HeaderSize:])
		if err == nil && n > 0 && n < len(msgs) {
			hdr[0] = codecLZ4
			copy(dst, hdr[:])
			buf.Write(dst[:HeaderSize+n])
			return
		}
	case Zstd, ZstdFastest:
		zs := e.zs
		if e.compression == ZstdFastest {
			zs = e.zfast
		}
		// The header first, then the compressed bytes straight into the
		// buffer's spare room after it.
		start := buf.Len()
		hdr[0] = codecZstd
		buf.Write(hdr[:])
		dst := zs.EncodeAll(msgs, buf.AvailableBuffer()[:0])
		if len(dst) < len(msgs) {
			buf.Write(dst)
			return
		}
		buf.Truncate(start)
	}
	hdr[0] = codecNone
	buf.Write(hdr[:])
	buf.Write(msgs)
}

// Encode appends one frame holding recs (all of schema) to buf with a
// one-off Encoder. Writers that encode many frames keep an Encoder.
func Encode(buf *bytes.Buffer, schema *arrow.Schema, recs []arrow.RecordBatch, compression string, mem memory.Allocator) (Stats, error) {
	e, err := NewEncoder(schema, compression, mem)
	if err != nil {
		return Stats{}, err
	}
	defer e.Close()
	return e.Encode(buf, recs)
}

// hasDictionary says whether any field, at any depth, is dictionary encoded.
func hasDictionary(fields []arrow.Field) bool {
	for _, f := range fields {
		switch t := f.Type.(type) {
		case *arrow.DictionaryType:
			return true
		case arrow.NestedType:
			if hasDictionary(t.Fields()) {
				return true
			}
		}
	}
	return false
}

// schemaMessage returns the encapsulated IPC schema message of schema
// (EncodeSchema without the end-of-stream marker).
func schemaMessage(schema *arrow.Schema) ([]byte, error) {
	b, err := EncodeSchema(schema)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-8], nil
}

// LogicalSize returns the uncompressed Arrow bytes of r's rows: exact for
// fixed-width, string and binary columns, also when r is a slice of a
// larger batch; other types are charged their whole buffers.
func LogicalSize(r arrow.RecordBatch) int64 {
	var total int64
	for _, c := range r.Columns() {
		total += arraySize(c)
	}
	return total
}

func arraySize(a arrow.Array) int64 {
	n := int64(a.Len())
	if n == 0 {
		return 0
	}
	var validity int64
	if a.NullN() > 0 {
		validity = (n + 7) / 8
	}
	switch v := a.(type) {
	case *array.String:
		offs := v.ValueOffsets()
		return validity + 4*(n+1) + int64(offs[len(offs)-1]-offs[0])
	case *array.Binary:
		offs := v.ValueOffsets()
		return validity + 4*(n+1) + int64(offs[len(offs)-1]-offs[0])
	case *array.LargeString:
		offs := v.ValueOffsets()
		return validity + 8*(n+1) + (offs[len(offs)-1] - offs[0])
	case *array.LargeBinary:
		offs := v.ValueOffsets()
		return validity + 8*(n+1) + (offs[len(offs)-1] - offs[0])
	}
	if fw, ok := a.DataType().(arrow.FixedWidthDataType); ok && a.DataType().ID() != arrow.DICTIONARY {
		return validity + (n*int64(fw.BitWidth())+7)/8
	}
	return dataSize(a.Data())
}

// ErrCorrupt marks a frame that does not decode.
var ErrCorrupt = errors.New("corrupt frame")

// Decoder decodes the frames of one schema. Safe for concurrent use.
type Decoder struct {
	schema    *arrow.Schema
	schemaMsg []byte
}

// NewDecoder returns a decoder of frames of schema (the stage's, from
// its manifest).
func NewDecoder(schema *arrow.Schema) (*Decoder, error) {
	msg, err := schemaMessage(schema)
	if err != nil {
		return nil, err
	}
	return &Decoder{schema: schema, schemaMsg: msg}, nil
}

// Decode reads every record batch of one frame of schema with a one-off
// Decoder. Readers of many frames keep a Decoder.
func Decode(b []byte, schema *arrow.Schema, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	d, err := NewDecoder(schema)
	if err != nil {
		return nil, err
	}
	return d.Decode(b, mem)
}

// Decode reads every record batch of one frame. The batches are the
// caller's to release. The bytes of b may be referenced by the batches
// when the frame is uncompressed, so b must not be reused until they are
// released.
//
// b is untrusted: a frame whose header or messages claim more bytes than
// b holds, or that decompresses to more than decodeLimit(len(b)) bytes,
// or whose arrays are inconsistent (offsets, lengths, null counts,
// dictionary indices) fails with ErrCorrupt rather than allocating
// without bound or handing out arrays that panic when their values are
// read.
func (d *Decoder) Decode(b []byte, mem memory.Allocator) (_ []arrow.RecordBatch, err error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	lim := &limitAllocator{mem: mem, left: decodeLimit(len(b)), size: len(b)}
	payload, err := decompress(b, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := verifyStream(payload); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	r, err := ipc.NewReaderFromMessageReader(&messages{segs: [][]byte{d.schemaMsg, payload}}, ipc.WithAllocator(lim))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	defer func() {
		lim.disarm() // the batches outlive Decode; their frees must not count
		if err != nil {
			for _, rec := range out {
				rec.Release()
			}
			out = nil
		}
	}()
	var rows int64
	hasNull := containsNull(d.schema.Fields())
	for r.Next() {
		rec := r.RecordBatch()
		if hasNull {
			rec = withNullBuffers(rec)
		} else {
			rec.Retain()
		}
		out = append(out, rec)
		// Columns of type null need no bytes per row, so nothing else
		// bounds a hostile row count.
		if rows += rec.NumRows(); rows > decodeLimit(len(b)) {
			return nil, fmt.Errorf("%w: a frame of %d bytes claims more than %d rows", ErrCorrupt, len(b), decodeLimit(len(b)))
		}
		for i, col := range rec.Columns() {
			if verr := validate(col); verr != nil {
				return nil, fmt.Errorf("%w: batch %d, column %q: %v", ErrCorrupt, len(out)-1, rec.Schema().Field(i).Name, verr)
			}
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return out, nil
}

// Stream returns the frame in b as a standalone Arrow IPC stream: the
// schema message, the frame's decompressed messages and the end-of-stream
// marker, which any Arrow implementation's stream reader opens. It is
// how a frame is read without durashuffle: decompress the payload the
// header describes and put the stage's schema message before it.
func (d *Decoder) Stream(b []byte) ([]byte, error) {
	lim := &limitAllocator{mem: memory.DefaultAllocator, left: decodeLimit(len(b)), size: len(b)}
	payload, err := decompress(b, lim)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	out := make([]byte, 0, len(d.schemaMsg)+len(payload)+8)
	out = append(out, d.schemaMsg...)
	out = append(out, payload...)
	return append(out, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0), nil
}

// decompress checks b's header and returns its IPC messages: b's own
// bytes for an uncompressed frame, else a new buffer of the length the
// header declares, which lim must allow before it is allocated.
func decompress(b []byte, lim *limitAllocator) ([]byte, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("a frame of %d bytes is shorter than its %d-byte header", len(b), HeaderSize)
	}
	if b[1]|b[2]|b[3] != 0 {
		return nil, fmt.Errorf("frame header bytes 1-3 are %x, want 0", b[1:4])
	}
	n := int64(binary.LittleEndian.Uint32(b[4:]))
	src := b[HeaderSize:]
	switch b[0] {
	case codecNone:
		if n != int64(len(src)) {
			return nil, fmt.Errorf("uncompressed frame header says %d bytes, %d follow", n, len(src))
		}
		return src, nil
	case codecLZ4, codecZstd:
	default:
		return nil, fmt.Errorf("unknown frame codec %d", b[0])
	}
	if n > lim.left {
		return nil, fmt.Errorf("a frame of %d bytes claims %d decompressed bytes, past its limit of %d", len(b), n, decodeLimit(len(b)))
	}
	lim.left -= n
	// Plain Go memory: decoded arrays point into it, and it lives as
	// long as they do.
	dst := make([]byte, n)
	if b[0] == codecLZ4 {
		got, err := lz4.UncompressBlock(src, dst)
		if err != nil {
			return nil, fmt.Errorf("lz4: %v", err)
		}
		if int64(got) != n {
			return nil, fmt.Errorf("lz4 block decompressed to %d bytes, header says %d", got, n)
		}
		return dst, nil
	}
	dec := zstdDecoders.Get().(*zstd.Decoder)
	defer zstdDecoders.Put(dec)
	if err := dec.Reset(bytes.NewReader(src)); err != nil {
		return nil, fmt.Errorf("zstd: %v", err)
	}
	if _, err := io.ReadFull(dec, dst); err != nil {
		return nil, fmt.Errorf("zstd frame decompressed to fewer bytes than the header's %d: %v", n, err)
	}
	var one [1]byte
	if k, _ := dec.Read(one[:]); k > 0 {
		return nil, fmt.Errorf("zstd frame decompresses to more than the header's %d bytes", n)
	}
	return dst, nil
}

// zstdDecoders are streaming decoders (one goroutine each), so that a
// frame decompresses into a buffer of exactly its declared size.
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		panic(err) // only bad options fail
	}
	return d
}}

// containsNull says whether any field, at any depth, is of type null.
func containsNull(fields []arrow.Field) bool {
	for _, f := range fields {
		switch t := f.Type.(type) {
		case *arrow.NullType:
			return true
		case arrow.NestedType:
			if containsNull(t.Fields()) {
				return true
			}
		}
	}
	return false
}

// withNullBuffers returns rec (retained, or rebuilt) with every array of
// type null given the one absent validity buffer its layout declares:
// arrow-go's IPC reader loads null arrays with no buffers at all, which
// its own validator, and so Decode, would reject.
func withNullBuffers(rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, rec.NumCols())
	for i, col := range rec.Columns() {
		if d, changed := nullBuffers(col.Data()); changed {
			cols[i] = array.MakeFromData(d)
			d.Release()
		} else {
			col.Retain()
			cols[i] = col
		}
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out
}

// nullBuffers returns d, or a new ArrayData (the caller's to release)
// where d or a descendant is a null array without buffers.
func nullBuffers(d arrow.ArrayData) (arrow.ArrayData, bool) {
	bufs := d.Buffers()
	changed := false
	if d.DataType().ID() == arrow.NULL && len(bufs) == 0 {
		bufs, changed = []*memory.Buffer{nil}, true
	}
	children := d.Children()
	var kids []arrow.ArrayData
	for i, c := range children {
		if nc, ch := nullBuffers(c); ch {
			if kids == nil {
				kids = slices.Clone(children)
			}
			kids[i], changed = nc, true
			defer nc.Release() // NewData retains it
		}
	}
	if !changed {
		return d, false
	}
	if kids == nil {
		kids = children
	}
	nd := array.NewData(d.DataType(), d.Len(), bufs, kids, d.NullN(), d.Offset())
	if dict := d.Dictionary(); dict != nil {
		nd.SetDictionary(dict)
	}
	return nd, true
}

// validate checks that an array decoded from untrusted bytes is safe to
// read: array.Validate's structural checks (buffer sizes, first and last
// offsets, children, dictionary), plus what array.ValidateFull adds that
// reading values would otherwise trip over: offsets in order, null counts
// that match the bitmap, dictionary indices in range. It skips
// ValidateFull's UTF-8 check of every string, which costs a third of a
// frame's decoding time and cannot make a read panic.
func validate(a arrow.Array) error {
	if err := array.Validate(a); err != nil {
		return err
	}
	return validateData(a.Data())
}

func validateData(d arrow.ArrayData) error {
	n, off := d.Len(), d.Offset()
	bufs := d.Buffers()
	switch d.DataType().ID() {
	case arrow.STRING, arrow.BINARY, arrow.LIST, arrow.MAP:
		if n > 0 {
			if err := ordered(arrow.Int32Traits.CastFromBytes(bufs[1].Bytes()), off, n); err != nil {
				return err
			}
		}
	case arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.LARGE_LIST:
		if n > 0 {
			if err := ordered(arrow.Int64Traits.CastFromBytes(bufs[1].Bytes()), off, n); err != nil {
				return err
			}
		}
	case arrow.DICTIONARY, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW, arrow.STRING_VIEW, arrow.BINARY_VIEW,
		arrow.RUN_END_ENCODED, arrow.SPARSE_UNION, arrow.DENSE_UNION:
		// Rare in frames: the full check (for a dictionary, its indices
		// against the dictionary, whose values it checks in full too).
		arr := array.MakeFromData(d)
		defer arr.Release()
		return array.ValidateFull(arr)
	}
	if nulls := d.NullN(); nulls != array.UnknownNullCount {
		actual := 0
		switch d.DataType().ID() {
		case arrow.NULL:
			actual = n
		default:
			if len(bufs) > 0 && bufs[0] != nil {
				actual = n - bitutil.CountSetBits(bufs[0].Bytes(), off, n)
			}
		}
		if actual != nulls {
			return fmt.Errorf("null count %d does not match the %d nulls of the validity bitmap", nulls, actual)
		}
	}
	for i, c := range d.Children() {
		if err := validateData(c); err != nil {
			return fmt.Errorf("child %d: %w", i, err)
		}
	}
	return nil
}

// ordered checks offsets[off : off+n+1]: present, non-negative and
// non-decreasing (array.Validate has checked the last one against the
// values' length).
func ordered[T int32 | int64](offsets []T, off, n int) error {
	if len(offsets) < off+n+1 {
		return fmt.Errorf("%d offsets for %d values at offset %d", len(offsets), n, off)
	}
	o := offsets[off : off+n+1]
	if o[0] < 0 {
		return fmt.Errorf("offset %d is negative", o[0])
	}
	for i := 1; i < len(o); i++ {
		if o[i] < o[i-1] {
			return fmt.Errorf("offsets decrease at value %d: %d after %d", off+i-1, o[i], o[i-1])
		}
	}
	return nil
}

// newReader opens the IPC stream held in b, which is untrusted: its
// message metadata is verified first (verifyStream), and every message
// must lie inside b, or a hostile metadata or body length would be
// allocated before the short read is noticed. (ipc.NewReader ignores the
// size-limit options; only a MessageReader applies them.)
func newReader(b []byte, mem memory.Allocator) (*ipc.Reader, error) {
	if err := verifyStream(b); err != nil {
		return nil, err
	}
	return ipc.NewReaderFromMessageReader(&messages{segs: [][]byte{b}}, ipc.WithAllocator(mem))
}

// messages reads IPC messages in place from byte segments (the stage's
// schema message, then a frame's verified messages): each message's
// metadata and body are slices of a segment, not copies (an io.Reader
// would copy every body once). Arrays of buffers stored uncompressed
// point into the segments, which must therefore outlive them and not
// change.
type messages struct {
	segs [][]byte
	pos  int
	cur  *ipc.Message
}

// Message returns the next message, io.EOF at an end-of-stream marker or
// the end of the segments. The segments were verified by verifyStream,
// so every length lies inside its segment.
func (m *messages) Message() (*ipc.Message, error) {
	if m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
	for len(m.segs) > 0 && len(m.segs[0])-m.pos < 4 {
		m.segs, m.pos = m.segs[1:], 0
	}
	if len(m.segs) == 0 {
		return nil, io.EOF
	}
	b := m.segs[0]
	n := int(int32(binary.LittleEndian.Uint32(b[m.pos:])))
	m.pos += 4
	if n == -1 {
		n = int(int32(binary.LittleEndian.Uint32(b[m.pos:])))
		m.pos += 4
	}
	if n == 0 {
		return nil, io.EOF
	}
	meta := b[m.pos : m.pos+n]
	m.pos += n
	body, err := verifyMessage(meta)
	if err != nil {
		return nil, err
	}
	msg := ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(b[m.pos:m.pos+int(body)]))
	m.pos += int(body)
	m.cur = msg
	return msg, nil
}

// Retain does nothing: messages holds no memory of its own.
func (m *messages) Retain() {}

// Release releases the last message.
func (m *messages) Release() {
	if m.cur != nil {
		m.cur.Release()
		m.cur = nil
	}
}

// decodeLimit bounds the bytes Decode allocates for the arrays of a frame
// of n bytes: 1024 times the frame (LZ4 cannot expand more than about 255
// times; zstd can, on constant data), and at least 256 MiB, far above
// what a frame of frame_target_bytes (default 1 MiB) decodes to.
func decodeLimit(n int) int64 {
	return max(minDecodeLimit, decodeRatio*int64(n))
}

const (
	minDecodeLimit = 256 << 20
	decodeRatio    = 1024
)

// limitAllocator fails an allocation, by panicking with ErrCorrupt (the
// IPC reader recovers it into an error), once the allocations of one
// Decode would pass the limit. A hostile frame can claim any
// uncompressed buffer size; this is what stops it being allocated.
type limitAllocator struct {
	mem  memory.Allocator
	size int // the frame's bytes, for the message

	mu   sync.Mutex
	left int64
	off  bool
}

func (a *limitAllocator) take(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.off || n <= 0 {
		return
	}
	if int64(n) > a.left {
		panic(fmt.Errorf("%w: a frame of %d bytes asks for %d more bytes of arrays, past its limit of %d", ErrCorrupt, a.size, n, decodeLimit(a.size)))
	}
	a.left -= int64(n)
}

func (a *limitAllocator) disarm() {
	a.mu.Lock()
	a.off = true
	a.mu.Unlock()
}

func (a *limitAllocator) Allocate(size int) []byte {
	a.take(size)
	return a.mem.Allocate(size)
}

func (a *limitAllocator) Reallocate(size int, b []byte) []byte {
	a.take(size - len(b))
	return a.mem.Reallocate(size, b)
}

func (a *limitAllocator) Free(b []byte) { a.mem.Free(b) }

// EncodeSchema returns the Arrow IPC encoding of schema (a stream holding
// only the schema message), as stored base64 in manifests.
func EncodeSchema(schema *arrow.Schema) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeSchema is the inverse of EncodeSchema. b is untrusted (it comes
// from a manifest): lengths in it are checked against its size.
func DecodeSchema(b []byte) (*arrow.Schema, error) {
	r, err := newReader(b, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}

// dataSize sums the buffer bytes of d and its children and dictionary.
func dataSize(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataSize(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		if dict := d.Dictionary(); dict != nil {
			n += dataSize(dict)
		}
	}
	return n
}
