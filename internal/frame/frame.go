// Package frame encodes and decodes durashuffle frames. A frame holds
// rows of one partition: an 8-byte header, then Arrow IPC messages (any
// dictionary batches, then one record batch; no schema message, no
// end-of-stream marker) compressed as one block. The stage's schema is
// stored once, in the manifest: the schema message followed by a frame's
// decompressed messages is a standard Arrow IPC stream.
package frame

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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

// Copies reports whether decoding the frame in b leaves its records
// pointing into memory of their own, never into b: true for a
// compressed frame (its messages are decompressed into a new buffer) and
// for an encrypted one (Opener.Open decrypts it into a new buffer),
// false for an uncompressed one or bytes with no valid header. A caller
// may reuse b after decoding only when Copies(b) held.
func Copies(b []byte) bool {
	return len(b) >= HeaderSize && (b[0] == codecLZ4 || b[0] == codecZstd || Encrypted(b))
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
