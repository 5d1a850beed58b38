package frame

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// schemaMessage returns the encapsulated IPC schema message of schema
// (EncodeSchema without the end-of-stream marker).
func schemaMessage(schema *arrow.Schema) ([]byte, error) {
	b, err := EncodeSchema(schema)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-8], nil
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
