// Package hostile makes the Arrow input that a buggy or malicious client
// sends, for the tests of every door a batch comes in by (the library's
// Writer.Write, the sidecar's DoPut, the CLI's write -i): batches whose
// schema has no columns, whose offsets are corrupt, and byte flips of
// IPC streams.
package hostile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Schema is the schema of Good and of every corrupt case but the
// zero-column one: an int64, a string and a list of int64.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String},
	{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
}, nil)

// GoodRows is the number of rows of Good.
const GoodRows = 5

// The offsets of Good's columns: distinctive runs of int32, found once in
// its IPC body, so a case can patch them there.
var (
	nameOffsets = []int32{0, 7, 18, 31, 48, 67}
	tagOffsets  = []int32{0, 3, 4, 8, 9, 14}
)

// Good is a valid batch of Schema: 5 rows, the names 7, 11, 13, 17 and 19
// letters long, 3, 1, 4, 1 and 5 tags (1000 to 1013).
func Good() arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b.Release()
	tags := b.Field(2).(*array.ListBuilder)
	vals := tags.ValueBuilder().(*array.Int64Builder)
	tag := int64(1000)
	for i := range GoodRows {
		b.Field(0).(*array.Int64Builder).Append(int64(100 + i))
		n := int(nameOffsets[i+1] - nameOffsets[i])
		b.Field(1).(*array.StringBuilder).Append(string(bytes.Repeat([]byte{byte('a' + i)}, n)))
		tags.Append(true)
		for range tagOffsets[i+1] - tagOffsets[i] {
			vals.Append(tag)
			tag++
		}
	}
	return b.NewRecordBatch()
}

// Case is one hostile batch, as an IPC stream (its schema, then the
// batch) and as the record a reader of that stream gets.
type Case struct {
	Name string
	// Column is the column a refusal must name ("" for the zero-column
	// schema), Want a fragment of the reason.
	Column, Want string
	Stream       []byte
}

// Batch decodes the case's stream: the corrupt record as a receiver
// gets it (Arrow's IPC reader does not validate offsets). The caller
// releases it.
func (c Case) Batch() (arrow.RecordBatch, error) {
	recs, err := Decode(c.Stream)
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 {
		for _, r := range recs {
			r.Release()
		}
		return nil, fmt.Errorf("case %s: %d batches in the stream, want 1", c.Name, len(recs))
	}
	return recs[0], nil
}

// Cases are the corrupt batches every door must refuse.
func Cases() []Case {
	good := Stream(Schema, Good())
	patched := func(pattern []int32, i int, v int32) []byte {
		return patchInt32(good, pattern, i, v)
	}
	zero := arrow.NewSchema(nil, nil)
	return []Case{
		{Name: "zero columns", Want: "no columns",
			Stream: Stream(zero, array.NewRecordBatch(zero, nil, GoodRows))},
		{Name: "negative first offset", Column: `"name" (utf8)`, Want: "negative: -20",
			Stream: patched(nameOffsets, 0, -20)},
		{Name: "list offsets past the child", Column: `"tags" (list<item: int64, nullable>)`, Want: "out of bounds: 99 > 14",
			Stream: patched(tagOffsets, 5, 99)},
		{Name: "string offsets decrease", Column: `"name" (utf8)`, Want: "not monotonically non-decreasing at index 2: 3 < 7",
			Stream: patched(nameOffsets, 2, 3)},
		{Name: "list offsets decrease", Column: `"tags" (list<item: int64, nullable>)`, Want: "not monotonically non-decreasing at index 3: 2 < 4",
			Stream: patched(tagOffsets, 3, 2)},
		{Name: "string not utf8", Column: `"name" (utf8)`, Want: "index 1 is not valid utf8",
			Stream: patchBytes(good, bytes.Repeat([]byte{'b'}, 11), 5, 0xFF)},
		{Name: "null count not the bitmap", Column: `"id" (int64)`, Want: "null count value (2) does not match actual number of nulls in array (1)",
			Stream: patchInt64(Stream(Schema, withNull()), []int64{GoodRows, 1}, 1, 2)},
	}
}

// withNull is Good with row 2's id null: the id column has a validity
// bitmap, and its field node says 1 null.
func withNull() arrow.RecordBatch {
	g := Good()
	defer g.Release()
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	ids := g.Column(0).(*array.Int64)
	for i := range GoodRows {
		if i == 2 {
			b.AppendNull()
		} else {
			b.Append(ids.Value(i))
		}
	}
	id := b.NewArray()
	defer id.Release()
	return array.NewRecordBatch(Schema, []arrow.Array{id, g.Column(1), g.Column(2)}, GoodRows)
}

// patchBytes returns a copy of b with byte i of the one run equal to
// pattern set to v.
func patchBytes(b, pattern []byte, i int, v byte) []byte {
	if n := bytes.Count(b, pattern); n != 1 {
		panic(fmt.Sprintf("hostile: bytes %q found %d times in the stream, want once", pattern, n))
	}
	out := bytes.Clone(b)
	out[bytes.Index(out, pattern)+i] = v
	return out
}

// patchInt64 returns a copy of b with value i of the one run of int64
// equal to pattern set to v (a field node is its length, then its null
// count).
func patchInt64(b []byte, pattern []int64, i int, v int64) []byte {
	pat := make([]byte, 8*len(pattern))
	for j, p := range pattern {
		binary.LittleEndian.PutUint64(pat[8*j:], uint64(p))
	}
	if n := bytes.Count(b, pat); n != 1 {
		panic(fmt.Sprintf("hostile: int64s %v found %d times in the stream, want once", pattern, n))
	}
	out := bytes.Clone(b)
	binary.LittleEndian.PutUint64(out[bytes.Index(out, pat)+8*i:], uint64(v))
	return out
}

// Stream encodes recs (released) as an uncompressed Arrow IPC stream of
// schema sc.
func Stream(sc *arrow.Schema, recs ...arrow.RecordBatch) []byte {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	for _, r := range recs {
		err := w.Write(r)
		r.Release()
		if err != nil {
			panic(fmt.Sprintf("hostile: encode a valid batch: %v", err))
		}
	}
	if err := w.Close(); err != nil {
		panic(fmt.Sprintf("hostile: close the IPC writer: %v", err))
	}
	return buf.Bytes()
}

// Decode reads every batch of an IPC stream (with Arrow's reader, which
// checks the framing but not the offsets). The caller releases them.
func Decode(stream []byte) ([]arrow.RecordBatch, error) {
	r, err := ipc.NewReader(bytes.NewReader(stream))
	if err != nil {
		return nil, err
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
		return nil, err
	}
	return out, nil
}

// patchInt32 returns a copy of b with value i of the one run of int32
// equal to pattern set to v.
func patchInt32(b []byte, pattern []int32, i int, v int32) []byte {
	pat := make([]byte, 4*len(pattern))
	for j, p := range pattern {
		binary.LittleEndian.PutUint32(pat[4*j:], uint32(p))
	}
	if n := bytes.Count(b, pat); n != 1 {
		panic(fmt.Sprintf("hostile: offsets %v found %d times in the stream, want once", pattern, n))
	}
	out := bytes.Clone(b)
	at := bytes.Index(out, pat) + 4*i
	binary.LittleEndian.PutUint32(out[at:], uint32(v))
	return out
}

// Message is one message of an IPC stream: its metadata (a FlightData's
// data_header) and body (data_body).
type Message struct {
	Header, Body []byte
}

// Messages splits an IPC stream into its messages without trusting it:
// it stops at the end-of-stream marker, at the end of the bytes, or at the
// first frame that does not fit; a body length that cannot be read or
// runs past the end is cut to what is there. Mutated streams still come
// apart into messages a DoPut can send.
func Messages(stream []byte) []Message {
	var out []Message
	b := stream
	for len(b) >= 8 {
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if n == 0xFFFFFFFF { // continuation marker, then the length
			n = binary.LittleEndian.Uint32(b)
			b = b[4:]
		}
		if n == 0 || int64(n) > int64(len(b)) {
			break
		}
		hdr := b[:n]
		b = b[n:]
		body := min(max(bodyLen(hdr), 0), int64(len(b)))
		out = append(out, Message{Header: hdr, Body: b[:body]})
		b = b[body:]
	}
	return out
}

// Type is the message's type as its header states it (MessageNone if
// the header cannot be read).
func (m Message) Type() (t ipc.MessageType) {
	defer func() {
		if recover() != nil {
			t = ipc.MessageNone
		}
	}()
	msg := ipc.NewMessage(memory.NewBufferBytes(m.Header), memory.NewBufferBytes(nil))
	return msg.Type()
}

// bodyLen is the body length a message header states, or -1.
func bodyLen(hdr []byte) (n int64) {
	defer func() {
		if recover() != nil {
			n = -1
		}
	}()
	m := ipc.NewMessage(memory.NewBufferBytes(hdr), memory.NewBufferBytes(nil))
	return m.BodyLen()
}

// Body returns the body of message i of stream (0: the schema, which has
// none; 1: the first batch) and where it starts in stream.
func Body(stream []byte, i int) (at int, body []byte) {
	ms := Messages(stream)
	if i >= len(ms) {
		return -1, nil
	}
	body = ms[i].Body
	if len(body) == 0 {
		return -1, nil
	}
	// The messages are slices of stream, sharing its end.
	return offsetIn(stream, body), body
}

// Flip returns a copy of stream with n bytes of batch message 1's body
// flipped (XOR with a random non-zero byte) at seeded random places.
func Flip(stream []byte, seed uint64, n int) []byte {
	at, body := Body(stream, 1)
	if at < 0 {
		panic("hostile: the stream has no batch body to flip")
	}
	out := bytes.Clone(stream)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for range n {
		out[at+rng.IntN(len(body))] ^= byte(1 + rng.IntN(255))
	}
	return out
}

// offsetIn is where sub starts in b, of which it is a slice to the end of
// b's capacity.
func offsetIn(b, sub []byte) int {
	return cap(b) - cap(sub)
}

// HugeFieldCount is a stream whose schema message says its fields vector
// holds 3,000,000,000 fields (the message is 280 bytes). Arrow's reader
// makes a slice of that many fields before it reads one: about 250 GB,
// and Go ends the process out of memory (a fatal error, not a panic).
func HugeFieldCount() []byte {
	stream := Stream(Schema, Good())
	ms := Messages(stream)
	hdr := ms[0].Header
	at := offsetIn(stream, hdr)
	u32 := func(p int) int { return int(binary.LittleEndian.Uint32(hdr[p:])) }
	// field returns where field id of the table at t is (flatbuffers: the
	// table starts with the offset back to its vtable, whose entry id is
	// at 4 + 2*id).
	field := func(t, id int) int {
		vt := t - int(int32(u32(t)))
		return t + int(binary.LittleEndian.Uint16(hdr[vt+4+2*id:]))
	}
	msg := u32(0)
	schema := field(msg, 2) + u32(field(msg, 2))       // Message.header
	fields := field(schema, 1) + u32(field(schema, 1)) // Schema.fields
	out := bytes.Clone(stream)
	binary.LittleEndian.PutUint32(out[at+fields:], 3_000_000_000)
	return out
}

// CompressionBomb is a stream of Good compressed with LZ4 whose first
// compressed buffer says it holds 1 TiB uncompressed. Arrow's reader
// allocates what the prefix says before it decompresses: Go ends the
// process out of memory.
func CompressionBomb() []byte {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(Schema), ipc.WithLZ4())
	rec := Good()
	if err := w.Write(rec); err != nil {
		panic(err)
	}
	rec.Release()
	if err := w.Close(); err != nil {
		panic(err)
	}
	stream := buf.Bytes()
	at, body := Body(stream, 1)
	if at < 0 || len(body) < 8 {
		panic("hostile: no compressed body")
	}
	// The first buffer with bytes starts the body: its first 8 bytes are
	// its uncompressed length.
	binary.LittleEndian.PutUint64(stream[at:], 1<<40)
	return stream
}
