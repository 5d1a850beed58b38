// Package frame encodes and decodes durashuffle frames: each frame is a
// complete, self-contained Arrow IPC stream (schema, record batches,
// end-of-stream marker) with IPC body compression, so any Arrow
// implementation can decode one frame's byte range on its own.
package frame

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Compression names accepted by Encode, as in the manifest and config.
const (
	LZ4  = "lz4"
	Zstd = "zstd"
	None = "none"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the Castagnoli CRC of b, the checksum S3 and the manifest use.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC32C extends crc with b.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// Stats describes an encoded frame.
type Stats struct {
	Rows  int64
	Bytes int64 // uncompressed Arrow buffer bytes of the rows
}

func options(schema *arrow.Schema, compression string, mem memory.Allocator) ([]ipc.Option, error) {
	opts := []ipc.Option{ipc.WithSchema(schema), ipc.WithAllocator(mem)}
	switch compression {
	case LZ4:
		opts = append(opts, ipc.WithLZ4())
	case Zstd:
		opts = append(opts, ipc.WithZstd())
	case None, "":
	default:
		return nil, fmt.Errorf("frame compression %q: want lz4, zstd or none", compression)
	}
	return opts, nil
}

// Encode appends one frame holding recs (all of schema) to buf. Several
// small batches are concatenated into one record batch first: one batch
// per frame keeps per-batch metadata and compression framing from
// growing with the number of inputs.
func Encode(buf *bytes.Buffer, schema *arrow.Schema, recs []arrow.RecordBatch, compression string, mem memory.Allocator) (Stats, error) {
	opts, err := options(schema, compression, mem)
	if err != nil {
		return Stats{}, err
	}
	batches := recs
	if len(recs) > 1 {
		if merged, err := Concat(schema, recs, mem); err == nil {
			defer merged.Release()
			batches = []arrow.RecordBatch{merged}
		}
		// Columns that cannot be concatenated (rare dictionary cases) are
		// written as separate batches of the same frame.
	}
	w := ipc.NewWriter(buf, opts...)
	var st Stats
	for _, r := range batches {
		if err := w.Write(r); err != nil {
			w.Close()
			return Stats{}, fmt.Errorf("encode frame of %d rows: %w", r.NumRows(), err)
		}
		st.Rows += r.NumRows()
		st.Bytes += LogicalSize(r)
	}
	if err := w.Close(); err != nil {
		return Stats{}, fmt.Errorf("close frame: %w", err)
	}
	return st, nil
}

// Concat merges recs into one record batch with compact buffers.
func Concat(schema *arrow.Schema, recs []arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	parts := make([]arrow.Array, len(recs))
	for i := range cols {
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, fmt.Errorf("concatenate column %q: %w", schema.Field(i).Name, err)
		}
		cols[i] = c
	}
	return array.NewRecordBatch(schema, cols, rows), nil
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

// Decode reads every record batch of one frame. The batches are the
// caller's to release. The bytes of b may be referenced by the batches
// when the frame is uncompressed, so b must not be reused until they are
// released.
func Decode(b []byte, mem memory.Allocator) (*arrow.Schema, []arrow.RecordBatch, error) {
	r, err := ipc.NewReader(bytes.NewReader(b), ipc.WithAllocator(mem))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		for _, rec := range out {
			rec.Release()
		}
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return r.Schema(), out, nil
}

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

// DecodeSchema is the inverse of EncodeSchema.
func DecodeSchema(b []byte) (*arrow.Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(b))
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
