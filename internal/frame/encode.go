package frame

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/durashuffle/durashuffle/internal/arrowipc"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

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
	rewrite bool // list views or unions: arrowipc.ForIPC before writing
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
	for _, f := range schema.Fields() {
		e.rewrite = e.rewrite || arrowipc.NeedsIPCRewrite(f.Type)
	}
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

// GrowTo makes room for n more bytes in buf. Unlike buf.Grow, which at
// least doubles the capacity, a buffer that is short grows to what it
// holds plus n, rounded up to growStep past growStep: a pooled frame
// buffer then ends near the largest frame it carried rather than twice
// that (each growth is an allocation the runtime zeroes, and a buffer
// past a pool's limit is dropped, so every frame after it allocated
// again). A smaller buffer grows to the size asked (the runtime rounds
// it to its size class): the frames of a writer at thousands of
// partitions are a few KiB each, and a 64 KiB buffer for each of them
// multiplied what it allocated.
func GrowTo(buf *bytes.Buffer, n int) {
	if buf.Available() >= n {
		return
	}
	size := buf.Len() + n
	if size > growStep {
		size = (size + growStep - 1) / growStep * growStep
	}
	b := make([]byte, buf.Len(), size)
	copy(b, buf.Bytes())
	*buf = *bytes.NewBuffer(b)
}

// growStep is what GrowTo rounds a buffer's capacity up to.
const growStep = 64 << 10

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
		if e.rewrite {
			r = arrowipc.ForIPC(r, e.mem)
			defer r.Release()
		}
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
		need := HeaderSize + lz4.CompressBlockBound(len(msgs))
		GrowTo(buf, need)
		dst := buf.AvailableBuffer()[:need]
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
