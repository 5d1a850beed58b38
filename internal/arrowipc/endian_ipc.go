package arrowipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/durashuffle/durashuffle/internal/ipcguard"
)

// NativeMessages reads the IPC messages of a stream (r from its first
// message: a stream, or the messages of an IPC file after its 8-byte
// magic) and returns them with the bodies of record batches and
// dictionary batches (delta dictionaries too) in native byte order, for
// ipc.NewReaderFromMessageReader with ipc.WithEnsureNativeEndian(false);
// the schema read keeps the order the input declares (mark it native:
// schema.WithEndianness).
//
// arrow-go cannot read big-endian input unswapped (its reader makes
// arrays of the batches, which checks string and list offsets in native
// order), and its own swapping refuses views, list views and run-end
// encoded arrays: the bodies are swapped before the reader sees them, buffer
// by buffer as the schema lays them out, with SwapEndian's rules (every
// Arrow type). Compressed bodies (LZ4 frame, zstd) are decompressed and
// passed on uncompressed, which IPC allows buffer by buffer.
func NativeMessages(r io.Reader) ipc.MessageReader {
	return &nativeMessages{r: r}
}

type nativeMessages struct {
	r      io.Reader
	swap   bool
	from   binary.ByteOrder
	fields []arrow.Field
	dicts  map[int64]arrow.DataType
	n      int
	err    error
}

func (m *nativeMessages) Retain()  {}
func (m *nativeMessages) Release() {}

// Message implements ipc.MessageReader.
func (m *nativeMessages) Message() (*ipc.Message, error) {
	if m.err != nil {
		return nil, m.err
	}
	msg, err := m.next()
	if err != nil {
		m.err = err
	}
	return msg, err
}

const (
	fbSchema          = 1
	fbDictionaryBatch = 2
	fbRecordBatch     = 3
	metadataV5        = 4
)

func (m *nativeMessages) next() (msg *ipc.Message, err error) {
	var pre [4]byte
	if _, err := io.ReadFull(m.r, pre[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("message %d: %w", m.n, err)
		}
		return nil, io.EOF
	}
	n := binary.LittleEndian.Uint32(pre[:])
	if n == 0xFFFFFFFF {
		if _, err := io.ReadFull(m.r, pre[:]); err != nil {
			return nil, io.EOF
		}
		n = binary.LittleEndian.Uint32(pre[:])
	}
	if n == 0 {
		return nil, io.EOF
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("message %d: metadata of %d bytes, more than the %d allowed", m.n, n, 1<<30)
	}
	var metaBuf bytes.Buffer
	if _, err := io.CopyN(&metaBuf, m.r, int64(n)); err != nil {
		return nil, fmt.Errorf("message %d: metadata: %w", m.n, err)
	}
	meta := metaBuf.Bytes()
	defer func() {
		// The metadata is not trusted: a table or vector out of its bytes
		// is an error, not a crash.
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("message %d: invalid metadata: %v", m.n, r)
		}
	}()
	// arrow-go allocates what a header states before it checks it (a
	// schema of 10^9 fields is an out-of-memory crash, not an error):
	// every header is checked the way the sidecar checks DoPut's.
	if err := ipcguard.CheckHeader(meta); err != nil {
		return nil, fmt.Errorf("message %d: %w", m.n, err)
	}
	root := fbRoot(meta)
	bodyLen := root.int64(3)
	if bodyLen < 0 {
		return nil, fmt.Errorf("message %d: body of %d bytes", m.n, bodyLen)
	}
	// Read into one buffer of the stated size, not one that doubles as it
	// fills; past maxPregrow the bytes must arrive before they are paid
	// for (the size is the sender's word).
	var bodyBuf bytes.Buffer
	bodyBuf.Grow(int(min(bodyLen, maxPregrow)) + bytes.MinRead)
	if _, err := io.CopyN(&bodyBuf, m.r, bodyLen); err != nil {
		return nil, fmt.Errorf("message %d: body of %d bytes: %w", m.n, bodyLen, err)
	}
	body := bodyBuf.Bytes()
	m.n++
	version := root.int16(0)
	header, ok := root.table(2)
	switch kind := root.uint8(1); {
	case !ok:
	case kind == fbSchema:
		if err := m.schema(meta, header); err != nil {
			return nil, err
		}
	case kind == fbRecordBatch && m.swap:
		var types []arrow.DataType
		for _, f := range m.fields {
			types = append(types, f.Type)
		}
		if body, err = m.swapBody(header, body, types, version); err != nil {
			return nil, fmt.Errorf("record batch (message %d): %w", m.n-1, err)
		}
	case kind == fbDictionaryBatch && m.swap:
		id := header.int64(0)
		dt, ok := m.dicts[id]
		data, dok := header.table(1)
		if !ok || !dok {
			return nil, fmt.Errorf("dictionary batch (message %d): no dictionary of id %d in the schema", m.n-1, id)
		}
		if body, err = m.swapBody(data, body, []arrow.DataType{dt}, version); err != nil {
			return nil, fmt.Errorf("dictionary batch of id %d (message %d): %w", id, m.n-1, err)
		}
	}
	if int64(len(body)) != bodyLen {
		p := root.field(3)
		if p == 0 {
			return nil, fmt.Errorf("message %d: no body length to rewrite", m.n-1)
		}
		binary.LittleEndian.PutUint64(meta[p:], uint64(len(body)))
	}
	return ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(body)), nil
}

// schema reads the schema's byte order and types (with arrow-go) and the
// ids of its dictionaries (from the metadata).
func (m *nativeMessages) schema(meta []byte, fb fbTable) error {
	rd, err := ipc.NewReaderFromMessageReader(&oneMessage{meta: meta}, ipc.WithEnsureNativeEndian(false))
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	sc := rd.Schema()
	rd.Release()
	if sc.IsNativeEndian() {
		return nil
	}
	m.swap, m.from = true, binary.ByteOrder(binary.LittleEndian)
	if sc.Endianness() == endian.BigEndian {
		m.from = binary.BigEndian
	}
	m.fields = sc.Fields()
	m.dicts = map[int64]arrow.DataType{}
	start, n := fb.vector(1)
	if n != len(m.fields) {
		return fmt.Errorf("schema: %d fields in the metadata, %d read", n, len(m.fields))
	}
	for i := range n {
		if err := m.dictIDs(fb.vectorTable(start, i), m.fields[i].Type); err != nil {
			return err
		}
	}
	return nil
}

// dictIDs maps the dictionary ids of field f (a Field table) and its
// children to their value types.
func (m *nativeMessages) dictIDs(f fbTable, dt arrow.DataType) error {
	dt = storageType(dt)
	if enc, ok := f.table(4); ok {
		d, ok := dt.(*arrow.DictionaryType)
		if !ok {
			return fmt.Errorf("schema: a dictionary-encoded field of type %s", dt)
		}
		m.dicts[enc.int64(0)] = d.ValueType
		dt = storageType(d.ValueType)
	}
	nt, ok := dt.(arrow.NestedType)
	if !ok {
		return nil
	}
	children := nt.Fields()
	start, n := f.vector(5)
	if n != len(children) {
		return fmt.Errorf("schema: %s has %d children in the metadata", dt, n)
	}
	for i := range n {
		if err := m.dictIDs(f.vectorTable(start, i), children[i].Type); err != nil {
			return err
		}
	}
	return nil
}

// swapBody returns a copy of body with the buffers of a RecordBatch table
// (rb) of columns of types swapped to native order.
func (m *nativeMessages) swapBody(rb fbTable, body []byte, types []arrow.DataType, version int16) ([]byte, error) {
	codec := -1
	if c, ok := rb.table(3); ok {
		codec = int(int8(c.uint8(0)))
	}
	l := layout{version: version, from: m.from}
	l.variadic, l.nvariadic = rb.vector(4)
	l.rb = rb
	for _, dt := range types {
		if err := l.walk(dt, 0); err != nil {
			return nil, err
		}
	}
	start, n := rb.vector(2)
	if n != len(l.kinds) {
		return nil, fmt.Errorf("%d buffers, the schema lays out %d", n, len(l.kinds))
	}
	if codec >= 0 {
		return swapCompressed(rb, start, body, l.kinds, codec)
	}
	out := bytes.Clone(body)
	for i, fn := range l.kinds {
		if fn == nil {
			continue
		}
		at := start + 16*i
		off := int64(binary.LittleEndian.Uint64(rb.b[at:]))
		size := int64(binary.LittleEndian.Uint64(rb.b[at+8:]))
		if off < 0 || size < 0 || off > int64(len(body)) || size > int64(len(body))-off {
			return nil, fmt.Errorf("buffer %d at %d of %d bytes is outside the body of %d bytes", i, off, size, len(body))
		}
		fn(out[off:off+size], body[off:off+size])
	}
	return out, nil
}

// swapCompressed swaps a compressed body: each buffer (a little-endian
// int64 uncompressed length, -1 for none, then LZ4 frame or zstd bytes,
// codec 0 or 1) is decompressed and swapped, and the new body holds it
// uncompressed (length -1), its offset and length rewritten in the
// metadata (rb's buffers vector at start).
func swapCompressed(rb fbTable, start int, body []byte, kinds []func(dst, src []byte), codec int) ([]byte, error) {
	var out []byte
	for i, fn := range kinds {
		at := start + 16*i
		off := int64(binary.LittleEndian.Uint64(rb.b[at:]))
		size := int64(binary.LittleEndian.Uint64(rb.b[at+8:]))
		if off < 0 || size < 0 || off > int64(len(body)) || size > int64(len(body))-off {
			return nil, fmt.Errorf("buffer %d at %d of %d bytes is outside the body of %d bytes", i, off, size, len(body))
		}
		newOff := int64(len(out))
		if size == 0 {
			binary.LittleEndian.PutUint64(rb.b[at:], uint64(newOff))
			continue
		}
		if size < 8 {
			return nil, fmt.Errorf("compressed buffer %d of %d bytes, under the 8 of its length", i, size)
		}
		src := body[off : off+size]
		raw := src[8:]
		if n := int64(binary.LittleEndian.Uint64(src)); n != -1 {
			if n < 0 || n > maxUncompressed {
				return nil, fmt.Errorf("compressed buffer %d of %d bytes uncompressed, more than the %d allowed", i, n, int64(maxUncompressed))
			}
			var err error
			if raw, err = decompress(codec, raw, n); err != nil {
				return nil, fmt.Errorf("buffer %d: %w", i, err)
			}
		}
		out = binary.LittleEndian.AppendUint64(out, ^uint64(0)) // -1: not compressed
		if fn != nil {
			at := len(out)
			out = append(out, make([]byte, len(raw))...)
			fn(out[at:], raw)
		} else {
			out = append(out, raw...)
		}
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		binary.LittleEndian.PutUint64(rb.b[at:], uint64(newOff))
		binary.LittleEndian.PutUint64(rb.b[at+8:], uint64(8+len(raw)))
	}
	return out, nil
}

// maxPregrow bounds the room taken for a message body before its bytes
// arrive.
const maxPregrow = 64 << 20

// maxUncompressed bounds a compressed buffer's declared size.
const maxUncompressed = 1 << 34

// decompress returns the n bytes that b decompresses to. The output grows
// with the bytes the codec actually produces, never to a declared size
// first: a hostile length costs nothing until the data backs it.
func decompress(codec int, b []byte, n int64) ([]byte, error) {
	var r io.Reader
	switch codec {
	case 0:
		r = lz4.NewReader(bytes.NewReader(b))
	case 1:
		d, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		r = d
	default:
		return nil, fmt.Errorf("compression codec %d unknown", codec)
	}
	var out bytes.Buffer
	got, err := io.Copy(&out, io.LimitReader(r, n+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("decompress %d bytes: %w", n, err)
	case got != n:
		return nil, fmt.Errorf("decompress: the buffer declares %d bytes and decompresses to %d", n, got)
	}
	return out.Bytes(), nil
}

// layout lists, buffer by buffer, how a RecordBatch's buffers swap (nil:
// bytes or bits, kept), following arrow-go's IPC reader.
type layout struct {
	version   int16
	from      binary.ByteOrder
	rb        fbTable
	variadic  int // start of variadicBufferCounts
	nvariadic int
	ivariadic int
	kinds     []func(dst, src []byte)
}

func widthKind(w int) func(dst, src []byte) {
	if w <= 1 {
		return nil
	}
	return func(dst, src []byte) { reverseEach(dst, src, w) }
}

func (l *layout) validity(id arrow.Type) {
	if l.version < metadataV5 {
		if id != arrow.NULL {
			l.kinds = append(l.kinds, nil)
		}
		return
	}
	switch id {
	case arrow.NULL, arrow.SPARSE_UNION, arrow.DENSE_UNION, arrow.RUN_END_ENCODED:
		return
	}
	l.kinds = append(l.kinds, nil)
}

func (l *layout) walk(dt arrow.DataType, depth int) error {
	if depth > maxSwapDepth {
		return fmt.Errorf("nested more than %d levels deep", maxSwapDepth)
	}
	dt = storageType(dt)
	id := dt.ID()
	if id == arrow.NULL {
		return nil
	}
	l.validity(id)
	switch id {
	case arrow.BOOL, arrow.INT8, arrow.UINT8, arrow.FIXED_SIZE_BINARY:
		l.kinds = append(l.kinds, nil)
	case arrow.INT16, arrow.UINT16, arrow.FLOAT16:
		l.kinds = append(l.kinds, widthKind(2))
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32, arrow.DATE32, arrow.TIME32,
		arrow.INTERVAL_MONTHS, arrow.DECIMAL32, arrow.INTERVAL_DAY_TIME:
		l.kinds = append(l.kinds, widthKind(4))
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.DATE64, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION, arrow.DECIMAL64:
		l.kinds = append(l.kinds, widthKind(8))
	case arrow.INTERVAL_MONTH_DAY_NANO:
		l.kinds = append(l.kinds, swapMonthDayNano)
	case arrow.DECIMAL128:
		l.kinds = append(l.kinds, widthKind(16))
	case arrow.DECIMAL256:
		l.kinds = append(l.kinds, widthKind(32))
	case arrow.DICTIONARY:
		w := dt.(*arrow.DictionaryType).IndexType.(arrow.FixedWidthDataType).BitWidth() / 8
		l.kinds = append(l.kinds, widthKind(w))
	case arrow.STRING, arrow.BINARY:
		l.kinds = append(l.kinds, widthKind(4), nil)
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		l.kinds = append(l.kinds, widthKind(8), nil)
	case arrow.STRING_VIEW, arrow.BINARY_VIEW:
		if l.ivariadic >= l.nvariadic {
			return fmt.Errorf("%d variadic buffer counts, a %s needs one more", l.nvariadic, dt)
		}
		n := int64(binary.LittleEndian.Uint64(l.rb.b[l.variadic+8*l.ivariadic:]))
		l.ivariadic++
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("a %s of %d data buffers", dt, n)
		}
		from := l.from
		l.kinds = append(l.kinds, func(dst, src []byte) { swapViews(dst, src, from) })
		for range n {
			l.kinds = append(l.kinds, nil)
		}
	case arrow.LIST, arrow.MAP:
		l.kinds = append(l.kinds, widthKind(4))
	case arrow.LARGE_LIST:
		l.kinds = append(l.kinds, widthKind(8))
	case arrow.LIST_VIEW:
		l.kinds = append(l.kinds, widthKind(4), widthKind(4))
	case arrow.LARGE_LIST_VIEW:
		l.kinds = append(l.kinds, widthKind(8), widthKind(8))
	case arrow.FIXED_SIZE_LIST, arrow.STRUCT, arrow.RUN_END_ENCODED:
	case arrow.SPARSE_UNION:
		l.kinds = append(l.kinds, nil)
	case arrow.DENSE_UNION:
		l.kinds = append(l.kinds, nil, widthKind(4))
	default:
		return fmt.Errorf("%w: swapping the byte order of %s", arrow.ErrNotImplemented, dt)
	}
	if nt, ok := dt.(arrow.NestedType); ok && id != arrow.DICTIONARY {
		for _, f := range nt.Fields() {
			if err := l.walk(f.Type, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// swapMonthDayNano swaps month-day-nano intervals: int32, int32, int64.
func swapMonthDayNano(dst, s []byte) {
	n := len(s) / 16 * 16
	reverseEach(dst[:n], s[:n], 4) // the nanoseconds' halves are put right below
	for j := 8; j < n; j += 16 {
		reverse(dst[j:j+8], s[j:j+8])
	}
	copy(dst[n:], s[n:])
}

// oneMessage is a stream of one schema message.
type oneMessage struct {
	meta []byte
	done bool
}

func (o *oneMessage) Retain()  {}
func (o *oneMessage) Release() {}
func (o *oneMessage) Message() (*ipc.Message, error) {
	if o.done {
		return nil, io.EOF
	}
	o.done = true
	return ipc.NewMessage(memory.NewBufferBytes(o.meta), memory.NewBufferBytes(nil)), nil
}

// fbTable is a flatbuffers table: the Arrow IPC metadata, read without
// arrow-go's internal flatbuffers package. Out-of-range reads panic (the
// caller recovers).
type fbTable struct {
	b   []byte
	pos int
}

func fbRoot(b []byte) fbTable {
	return fbTable{b: b, pos: int(binary.LittleEndian.Uint32(b))}
}

// field is the position of field slot's value, or 0 when absent.
func (t fbTable) field(slot int) int {
	vt := t.pos - int(int32(binary.LittleEndian.Uint32(t.b[t.pos:])))
	size := int(binary.LittleEndian.Uint16(t.b[vt:]))
	o := 4 + 2*slot
	if o+2 > size {
		return 0
	}
	off := int(binary.LittleEndian.Uint16(t.b[vt+o:]))
	if off == 0 {
		return 0
	}
	return t.pos + off
}

func (t fbTable) int64(slot int) int64 {
	if p := t.field(slot); p != 0 {
		return int64(binary.LittleEndian.Uint64(t.b[p:]))
	}
	return 0
}

func (t fbTable) int16(slot int) int16 {
	if p := t.field(slot); p != 0 {
		return int16(binary.LittleEndian.Uint16(t.b[p:]))
	}
	return 0
}

func (t fbTable) uint8(slot int) uint8 {
	if p := t.field(slot); p != 0 {
		return t.b[p]
	}
	return 0
}

func (t fbTable) table(slot int) (fbTable, bool) {
	p := t.field(slot)
	if p == 0 {
		return fbTable{}, false
	}
	return fbTable{b: t.b, pos: p + int(binary.LittleEndian.Uint32(t.b[p:]))}, true
}

// vector is the start and length of the vector in field slot.
func (t fbTable) vector(slot int) (start, n int) {
	p := t.field(slot)
	if p == 0 {
		return 0, 0
	}
	v := p + int(binary.LittleEndian.Uint32(t.b[p:]))
	return v + 4, int(binary.LittleEndian.Uint32(t.b[v:]))
}

// vectorTable is table i of a vector of tables starting at start.
func (t fbTable) vectorTable(start, i int) fbTable {
	p := start + 4*i
	return fbTable{b: t.b, pos: p + int(binary.LittleEndian.Uint32(t.b[p:]))}
}

// StreamEndianness reads the byte order the schema message at the start
// of b (an IPC stream's first bytes) declares; ok is false when b does
// not hold the whole schema message.
func StreamEndianness(b []byte) (e endian.Endianness, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	if len(b) < 8 {
		return 0, false
	}
	n, at := binary.LittleEndian.Uint32(b), 4
	if n == 0xFFFFFFFF {
		n, at = binary.LittleEndian.Uint32(b[4:]), 8
	}
	if n == 0 || uint64(at)+uint64(n) > uint64(len(b)) {
		return 0, false
	}
	root := fbRoot(b[at : at+int(n)])
	header, hok := root.table(2)
	if root.uint8(1) != fbSchema || !hok {
		return 0, false
	}
	return endian.Endianness(header.int16(0)), true
}
