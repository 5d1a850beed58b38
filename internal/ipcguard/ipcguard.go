// Package ipcguard checks Arrow IPC messages from an untrusted sender
// before Arrow's reader decodes them, and bounds what the reader may
// allocate, so that a hostile stream fails with an error instead of
// ending the process.
package ipcguard

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// What an untrusted stream's IPC messages may ask of the decoder. Arrow's reader
// allocates what a message header states before it checks it: a schema
// claiming 10^9 fields, a union with 10^9 type ids, or a variadic buffer
// count of 2^40 makes a slice that large, and Go ends the process (out of
// memory is fatal, not a panic); a field whose children include itself
// recurses until the stack overflows (fatal too); a compressed buffer's
// stated uncompressed length is allocated as it says. So the headers are
// checked first (CheckHeader), and decoded buffers are counted
// (NewAllocator).
const (
	// maxSchemaFields bounds a schema's fields, nested ones included
	// (counted as Arrow's reader walks them, a field shared by several
	// parents once for each).
	maxSchemaFields = 1 << 16
	// maxSchemaDepth bounds a schema's nesting (Arrow's own array loader
	// stops at 64 too).
	maxSchemaDepth = 64
)

// CheckHeader checks an IPC message header (a FlightData's
// data_header, an Arrow Message flatbuffer) before Arrow's reader sees
// it: every table, string and vector it points to lies inside it, a
// schema has at most maxSchemaFields fields and maxSchemaDepth levels, and
// a record batch's variadic buffer counts are within its buffers. It reads
// the flatbuffer itself, bounds-checking every read.
func CheckHeader(hdr []byte) error {
	b := fbuf(hdr)
	root, err := b.root()
	if err != nil {
		return err
	}
	if err := b.keyValues(root, 4); err != nil {
		return fmt.Errorf("message metadata: %w", err)
	}
	typ, err := b.u8Field(root, 1)
	if err != nil {
		return err
	}
	header, ok, err := b.tableField(root, 2)
	if err != nil || !ok {
		return err
	}
	switch typ {
	case 1: // Schema
		return b.schema(header)
	case 2: // DictionaryBatch: its data is a RecordBatch
		data, ok, err := b.tableField(header, 1)
		if err != nil || !ok {
			return err
		}
		return b.recordBatch(data)
	case 3: // RecordBatch
		return b.recordBatch(header)
	}
	return nil // Arrow's reader refuses the other kinds
}

// fbuf reads a flatbuffer, checking every position against its length.
type fbuf []byte

func (b fbuf) u32(at int64) (uint32, error) {
	if at < 0 || at+4 > int64(len(b)) {
		return 0, fmt.Errorf("flatbuffer read at %d past its %d bytes", at, len(b))
	}
	return binary.LittleEndian.Uint32(b[at:]), nil
}

func (b fbuf) u16(at int64) (uint16, error) {
	if at < 0 || at+2 > int64(len(b)) {
		return 0, fmt.Errorf("flatbuffer read at %d past its %d bytes", at, len(b))
	}
	return binary.LittleEndian.Uint16(b[at:]), nil
}

// root is the position of the root table.
func (b fbuf) root() (int64, error) {
	off, err := b.u32(0)
	if err != nil {
		return 0, err
	}
	return b.table(int64(off))
}

// table checks the table at pos and its vtable, and returns pos.
func (b fbuf) table(pos int64) (int64, error) {
	so, err := b.u32(pos)
	if err != nil {
		return 0, err
	}
	vt := pos - int64(int32(so))
	size, err := b.u16(vt)
	if err != nil {
		return 0, err
	}
	if size < 4 || vt+int64(size) > int64(len(b)) {
		return 0, fmt.Errorf("flatbuffer vtable at %d of %d bytes does not fit in %d", vt, size, len(b))
	}
	return pos, nil
}

// field is the position of field id of the table at pos, or 0 if absent.
func (b fbuf) field(pos int64, id int) (int64, error) {
	so, _ := b.u32(pos) // checked by table
	vt := pos - int64(int32(so))
	size, _ := b.u16(vt)
	slot := int64(4 + 2*id)
	if slot+2 > int64(size) {
		return 0, nil
	}
	o, err := b.u16(vt + slot)
	if err != nil || o == 0 {
		return 0, err
	}
	return pos + int64(o), nil
}

func (b fbuf) u8Field(pos int64, id int) (byte, error) {
	at, err := b.field(pos, id)
	if err != nil || at == 0 {
		return 0, err
	}
	if at >= int64(len(b)) {
		return 0, fmt.Errorf("flatbuffer read at %d past its %d bytes", at, len(b))
	}
	return b[at], nil
}

// tableField is the position of the table field id points to.
func (b fbuf) tableField(pos int64, id int) (int64, bool, error) {
	at, err := b.field(pos, id)
	if err != nil || at == 0 {
		return 0, false, err
	}
	off, err := b.u32(at)
	if err != nil {
		return 0, false, err
	}
	t, err := b.table(at + int64(off))
	return t, err == nil, err
}

// vector returns where the elements of vector field id start and how many
// there are, checking that n elements of elem bytes fit.
func (b fbuf) vector(pos int64, id int, elem int64) (start, n int64, err error) {
	at, err := b.field(pos, id)
	if err != nil || at == 0 {
		return 0, 0, err
	}
	off, err := b.u32(at)
	if err != nil {
		return 0, 0, err
	}
	v := at + int64(off)
	l, err := b.u32(v)
	if err != nil {
		return 0, 0, err
	}
	start, n = v+4, int64(l)
	if start+n*elem > int64(len(b)) {
		return 0, 0, fmt.Errorf("flatbuffer vector at %d of %d elements (%d bytes each) runs past its %d bytes", v, n, elem, len(b))
	}
	return start, n, nil
}

// tables checks each table of the vector of tables field id and calls f
// with its position.
func (b fbuf) tables(pos int64, id int, f func(int64) error) error {
	start, n, err := b.vector(pos, id, 4)
	if err != nil {
		return err
	}
	for i := range n {
		at := start + 4*i
		off, _ := b.u32(at)
		t, err := b.table(at + int64(off))
		if err != nil {
			return err
		}
		if err := f(t); err != nil {
			return err
		}
	}
	return nil
}

// keyValues checks a custom_metadata vector: KeyValue tables of strings.
func (b fbuf) keyValues(pos int64, id int) error {
	return b.tables(pos, id, func(kv int64) error {
		for s := range 2 {
			if _, _, err := b.vector(kv, s, 1); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b fbuf) schema(pos int64) error {
	if err := b.keyValues(pos, 2); err != nil {
		return fmt.Errorf("schema metadata: %w", err)
	}
	if _, _, err := b.vector(pos, 3, 8); err != nil { // features
		return err
	}
	fields := 0
	var walk func(f int64, depth int) error
	walk = func(f int64, depth int) error {
		if fields++; fields > maxSchemaFields {
			return fmt.Errorf("schema has more than %d fields, nested ones included", maxSchemaFields)
		}
		if depth > maxSchemaDepth {
			return fmt.Errorf("schema nests more than %d levels", maxSchemaDepth)
		}
		if _, _, err := b.vector(f, 0, 1); err != nil { // name
			return err
		}
		if err := b.keyValues(f, 6); err != nil {
			return fmt.Errorf("field metadata: %w", err)
		}
		typ, err := b.u8Field(f, 2)
		if err != nil {
			return err
		}
		t, ok, err := b.tableField(f, 3)
		if err != nil {
			return err
		}
		if ok && typ == 14 { // Union: its type ids
			if _, _, err := b.vector(t, 1, 4); err != nil {
				return err
			}
		}
		if d, ok, err := b.tableField(f, 4); err != nil { // dictionary encoding
			return err
		} else if ok {
			if _, _, err := b.tableField(d, 1); err != nil { // its index type
				return err
			}
		}
		return b.tables(f, 5, func(child int64) error { return walk(child, depth+1) })
	}
	return b.tables(pos, 1, func(f int64) error { return walk(f, 1) })
}

func (b fbuf) recordBatch(pos int64) error {
	if _, _, err := b.vector(pos, 1, 16); err != nil { // nodes
		return err
	}
	_, buffers, err := b.vector(pos, 2, 16)
	if err != nil {
		return err
	}
	if _, _, err := b.tableField(pos, 3); err != nil { // compression
		return err
	}
	start, n, err := b.vector(pos, 4, 8)
	if err != nil {
		return err
	}
	for i := range n {
		c := int64(binary.LittleEndian.Uint64(b[start+8*i:]))
		if c < 0 || c > buffers {
			return fmt.Errorf("variadic buffer count %d of field %d, the batch has %d buffers", c, i, buffers)
		}
	}
	return nil
}

// NewAllocator returns an allocator for an IPC reader of untrusted
// input, on mem. Arrow's reader allocates through it only what it
// decompresses, sized as each buffer's header says; it refuses (panics,
// which the reader turns into its error) to hold more than limit bytes at
// once, so a stated length of 2^40 fails the stream instead of the
// process; the error says the bytes, the limit and what, which says
// where the limit comes from ("a DoPut may hold decoded at once
// (coalesce_budget + 4 x max_message_bytes)"). What a consumer keeps of
// a batch stays counted until it lets the batch go.
func NewAllocator(mem memory.Allocator, limit int64, what string) memory.Allocator {
	return NewBudgetAllocator(mem, &liveBudget{limit: limit, what: what})
}

// A Budget is what an allocator of NewBudgetAllocator asks before it
// allocates. Its methods must be safe for concurrent use: the
// allocator is.
type Budget interface {
	// Take counts n more bytes (n < 0 when a Reallocate shrinks a
	// buffer), or refuses them by panicking with the error the IPC
	// reader is to fail with.
	Take(n int)
	// Give is told the n bytes of a buffer freed.
	Give(n int)
}

// NewBudgetAllocator returns an allocator on mem that asks b to Take
// the bytes of every Allocate and Reallocate before it allocates them,
// and tells b of every Free.
func NewBudgetAllocator(mem memory.Allocator, b Budget) memory.Allocator {
	return &budgetAllocator{Allocator: mem, b: b}
}

type budgetAllocator struct {
	memory.Allocator
	b Budget
}

func (a *budgetAllocator) Allocate(n int) []byte {
	a.b.Take(n)
	return a.Allocator.Allocate(n)
}

func (a *budgetAllocator) Reallocate(n int, b []byte) []byte {
	a.b.Take(n - len(b))
	return a.Allocator.Reallocate(n, b)
}

func (a *budgetAllocator) Free(b []byte) {
	a.b.Give(len(b))
	a.Allocator.Free(b)
}

// liveBudget is NewAllocator's budget: the bytes held at once.
type liveBudget struct {
	limit int64
	what  string // what limit is, for the error
	live  atomic.Int64
}

func (l *liveBudget) Take(n int) {
	if live := l.live.Add(int64(n)); n > 0 && live > l.limit {
		l.live.Add(-int64(n))
		panic(fmt.Errorf("decoded buffers would take %d bytes, more than the %d %s", live, l.limit, l.what))
	}
}

func (l *liveBudget) Give(n int) { l.live.Add(-int64(n)) }
