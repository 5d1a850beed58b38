package store

import (
	"bytes"
	"fmt"
	"io"
)

// Body is the bytes of one part, held so that every attempt (a retry's,
// a hedge's) reads them again from the first byte: a slice in memory, a
// section of a file on disk, or a stream whose bytes may still be being
// produced. A Body is a small value; copies share its bytes.
type Body struct {
	size   int64
	mem    []byte
	file   *io.SectionReader
	stream func() io.Reader
	crc    uint32
	hasCRC bool
}

// BytesBody is a body of the bytes of b, which must stay unchanged until
// the request that sends it returns.
func BytesBody(b []byte) Body { return Body{size: int64(len(b)), mem: b} }

// FileBody is a body of the bytes of a section of a file: every attempt
// reads them from disk through a section reader of its own (r is not
// moved), so a part's bytes need not be in memory however large it is.
func FileBody(r *io.SectionReader) Body { return Body{size: r.Size(), file: r} }

// StreamBody is a body of exactly size bytes that open returns a reader
// of, from the first byte, once per attempt. The reader may block until
// its bytes exist (a chunk still filling), so nothing may seek it or read
// it ahead: a store sends it as it is read, with its CRC32C computed on
// the way (see Writer.UploadPart).
func StreamBody(size int64, open func() io.Reader) Body {
	return Body{size: size, stream: open}
}

// WithCRC32C returns b carrying its bytes' CRC32C, which the store sends
// with them and checks against what arrived. A streamed body's is
// computed while it is sent; one given here is ignored.
func (b Body) WithCRC32C(sum uint32) Body {
	b.crc, b.hasCRC = sum, true
	return b
}

// Size is the body's length in bytes.
func (b Body) Size() int64 { return b.size }

// CRC32C is the checksum given with WithCRC32C, if any.
func (b Body) CRC32C() (uint32, bool) { return b.crc, b.hasCRC && b.stream == nil }

// Streamed reports whether the body is a stream: its reader can be read
// once, in order, and is no io.Seeker.
func (b Body) Streamed() bool { return b.stream != nil }

// Reader returns a reader of the body from its first byte; each call a
// new one. Unless the body is streamed it is an io.ReadSeeker.
func (b Body) Reader() io.Reader {
	switch {
	case b.stream != nil:
		return b.stream()
	case b.file != nil:
		return io.NewSectionReader(b.file, 0, b.size)
	}
	return bytes.NewReader(b.mem)
}

// Bytes returns the body's bytes when they are one slice in memory.
func (b Body) Bytes() ([]byte, bool) {
	return b.mem, b.stream == nil && b.file == nil
}

// String says how long the body is and how its bytes are held, for
// errors.
func (b Body) String() string {
	switch {
	case b.stream != nil:
		return fmt.Sprintf("streamed, %d bytes", b.size)
	case b.file != nil:
		return fmt.Sprintf("%d bytes from a file section", b.size)
	}
	return fmt.Sprintf("%d bytes", b.size)
}
