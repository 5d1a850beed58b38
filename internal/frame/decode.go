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
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/durashuffle/durashuffle/internal/ipcguard"
)

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
	return d.decode([][]byte{b}, len(b), mem)
}

// DecodeAll decodes several frames of the decoder's schema as Decode
// does each, in order, with one IPC reader for all of them where the
// schema has no dictionaries (each frame then carries its own), so the
// schema is read once, not once per frame: a writer that merges many
// small frames into one spends less on reading them.
func (d *Decoder) DecodeAll(frames [][]byte, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	if hasDictionary(d.schema.Fields()) {
		var out []arrow.RecordBatch
		for i, b := range frames {
			recs, err := d.Decode(b, mem)
			if err != nil {
				for _, r := range out {
					r.Release()
				}
				return nil, fmt.Errorf("frame %d of %d: %w", i+1, len(frames), err)
			}
			out = append(out, recs...)
		}
		return out, nil
	}
	var total int
	for _, b := range frames {
		total += len(b)
	}
	return d.decode(frames, total, mem)
}

// decode reads every record batch of frames, total bytes in all, with
// one IPC reader: frames are either one frame or frames of a schema
// without dictionaries.
func (d *Decoder) decode(frames [][]byte, total int, mem memory.Allocator) (_ []arrow.RecordBatch, err error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	lim := newDecodeBudget(total)
	segs := make([][]byte, 1, 1+len(frames))
	segs[0] = d.schemaMsg
	for i, b := range frames {
		payload, err := decompress(b, lim)
		if err == nil {
			err = verifyStream(payload)
		}
		if err != nil {
			if len(frames) > 1 {
				return nil, fmt.Errorf("%w: frame %d of %d: %v", ErrCorrupt, i+1, len(frames), err)
			}
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		segs = append(segs, payload)
	}
	r, err := ipc.NewReaderFromMessageReader(&messages{segs: segs}, ipc.WithAllocator(ipcguard.NewBudgetAllocator(mem, lim)))
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
		if rows += rec.NumRows(); rows > decodeLimit(total) {
			return nil, fmt.Errorf("%w: a frame of %d bytes claims more than %d rows", ErrCorrupt, total, decodeLimit(total))
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
	lim := newDecodeBudget(len(b))
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
func decompress(b []byte, lim *decodeBudget) ([]byte, error) {
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

// decodeBudget fails an allocation, by panicking with ErrCorrupt (the
// IPC reader recovers it into an error), once the allocations of one
// Decode would pass the limit. A hostile frame can claim any
// uncompressed buffer size; this is what stops it being allocated.
// Frees give nothing back: the limit bounds all one Decode allocates.
type decodeBudget struct {
	size int // the frame's bytes, for the message

	mu   sync.Mutex
	left int64
	off  bool
}

func newDecodeBudget(size int) *decodeBudget {
	return &decodeBudget{left: decodeLimit(size), size: size}
}

func (a *decodeBudget) Take(n int) {
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

func (a *decodeBudget) Give(int) {}

func (a *decodeBudget) disarm() {
	a.mu.Lock()
	a.off = true
	a.mu.Unlock()
}
