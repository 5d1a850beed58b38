package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Arrow IPC message metadata is a flatbuffer, and arrow-go reads it without
// verifying it: a vector length is trusted, and the field list of a schema
// is allocated from it (make([]arrow.Field, n)) before anything checks that
// n fields fit in the message. A 1 KiB frame claiming 2^30 fields makes the
// Go runtime die of "out of memory", which no recover catches. verifyStream
// walks every message of a stream first, the way arrow-go will read it,
// and refuses any table, vector or string that does not lie inside the
// message, nesting deeper than maxDepth, and message types a frame never
// holds. It is cheap: metadata is a few hundred bytes per message and the
// bodies are skipped.

// maxDepth bounds the nesting of fields (and the recursion verifying them).
const maxDepth = 64

var errMeta = errors.New("invalid message metadata")

// verifyStream checks the messages of the IPC stream in b: every length
// inside b, every message's metadata sound. It stops at the end-of-stream
// marker, as the IPC reader does.
func verifyStream(b []byte) error {
	pos := 0
	for i := 0; pos < len(b); i++ {
		if len(b)-pos < 4 {
			return fmt.Errorf("message %d at byte %d: %d stray bytes", i, pos, len(b)-pos)
		}
		n := int64(int32(binary.LittleEndian.Uint32(b[pos:])))
		pos += 4
		if n == -1 { // continuation marker, then the length
			if len(b)-pos < 4 {
				return fmt.Errorf("message %d at byte %d: no length after the continuation marker", i, pos)
			}
			n = int64(int32(binary.LittleEndian.Uint32(b[pos:])))
			pos += 4
		}
		if n == 0 {
			return nil // end of stream
		}
		if n < 4 || n > int64(len(b)-pos) {
			return fmt.Errorf("message %d at byte %d: metadata length %d, %d bytes left", i, pos, n, len(b)-pos)
		}
		meta := b[pos : pos+int(n)]
		pos += int(n)
		body, err := verifyMessage(meta)
		if err != nil {
			return fmt.Errorf("message %d at byte %d: %w", i, pos-int(n), err)
		}
		if body < 0 || body > int64(len(b)-pos) {
			return fmt.Errorf("message %d: body length %d, %d bytes left", i, body, len(b)-pos)
		}
		pos += int(body)
	}
	return nil
}

// fb reads a flatbuffer with every position checked.
type fb struct {
	b      []byte
	budget int // tables left to visit: each needs 4 bytes of its own
}

type table struct {
	pos, vt, vtSize, size int
}

func (v *fb) u16(pos int) (int, error) {
	if pos < 0 || pos > len(v.b)-2 {
		return 0, fmt.Errorf("%w: read of 2 bytes at %d of %d", errMeta, pos, len(v.b))
	}
	return int(binary.LittleEndian.Uint16(v.b[pos:])), nil
}

func (v *fb) u32(pos int) (int, error) {
	if pos < 0 || pos > len(v.b)-4 {
		return 0, fmt.Errorf("%w: read of 4 bytes at %d of %d", errMeta, pos, len(v.b))
	}
	return int(binary.LittleEndian.Uint32(v.b[pos:])), nil
}

// table opens the table at pos: its vtable and its inline bytes in bounds.
func (v *fb) table(pos int) (table, error) {
	if v.budget--; v.budget < 0 {
		return table{}, fmt.Errorf("%w: more tables than a message of %d bytes holds", errMeta, len(v.b))
	}
	soff, err := v.u32(pos)
	if err != nil {
		return table{}, err
	}
	t := table{pos: pos, vt: pos - int(int32(soff))}
	if t.vtSize, err = v.u16(t.vt); err != nil {
		return table{}, err
	}
	if t.size, err = v.u16(t.vt + 2); err != nil {
		return table{}, err
	}
	if t.vtSize < 4 || t.vtSize%2 != 0 || t.vt+t.vtSize > len(v.b) || t.size < 4 || pos+t.size > len(v.b) {
		return table{}, fmt.Errorf("%w: table at %d: vtable at %d of %d bytes, table of %d bytes, message of %d", errMeta, pos, t.vt, t.vtSize, t.size, len(v.b))
	}
	return t, nil
}

// field returns the position of field slot (of size bytes inline), or -1
// when it is absent.
func (v *fb) field(t table, slot, size int) (int, error) {
	vo := 4 + 2*slot
	if vo+2 > t.vtSize {
		return -1, nil
	}
	off, err := v.u16(t.vt + vo)
	if err != nil || off == 0 {
		return -1, err
	}
	if off+size > t.size {
		return 0, fmt.Errorf("%w: field %d of the table at %d lies outside its %d bytes", errMeta, slot, t.pos, t.size)
	}
	return t.pos + off, nil
}

// ref follows an offset field (table, vector, string, union) to its
// target, or returns -1 when it is absent.
func (v *fb) ref(t table, slot int) (int, error) {
	p, err := v.field(t, slot, 4)
	if err != nil || p < 0 {
		return -1, err
	}
	u, err := v.u32(p)
	if err != nil {
		return 0, err
	}
	return p + u, nil
}

// vector checks the vector at pos holds its elements and returns their
// count and the position of the first.
func (v *fb) vector(pos, elem int) (n, start int, err error) {
	if n, err = v.u32(pos); err != nil {
		return 0, 0, err
	}
	if n > (len(v.b)-pos-4)/elem {
		return 0, 0, fmt.Errorf("%w: vector at %d claims %d elements of %d bytes, message of %d", errMeta, pos, n, elem, len(v.b))
	}
	return n, pos + 4, nil
}

// vectorField checks the vector (or string) in slot, if present.
func (v *fb) vectorField(t table, slot, elem int) (n, start int, err error) {
	p, err := v.ref(t, slot)
	if err != nil || p < 0 {
		return 0, 0, err
	}
	return v.vector(p, elem)
}

// tables checks the vector of tables in slot with each.
func (v *fb) tables(t table, slot int, each func(table) error) error {
	n, start, err := v.vectorField(t, slot, 4)
	if err != nil {
		return err
	}
	for i := range n {
		p := start + 4*i
		u, err := v.u32(p)
		if err != nil {
			return err
		}
		et, err := v.table(p + u)
		if err != nil {
			return err
		}
		if err := each(et); err != nil {
			return err
		}
	}
	return nil
}

// child opens the table in slot, if present (ok false when absent).
func (v *fb) child(t table, slot int) (table, bool, error) {
	p, err := v.ref(t, slot)
	if err != nil || p < 0 {
		return table{}, false, err
	}
	ct, err := v.table(p)
	return ct, err == nil, err
}

// scalars checks that the inline fields of t (slot: size) are in bounds.
func (v *fb) scalars(t table, sizes ...int) error {
	for slot, size := range sizes {
		if size == 0 {
			continue
		}
		if _, err := v.field(t, slot, size); err != nil {
			return err
		}
	}
	return nil
}

// Message header types (Schema.fbs MessageHeader) and field type tags
// (Type) that carry more than scalars.
const (
	headerSchema          = 1
	headerDictionaryBatch = 2
	headerRecordBatch     = 3
	typeTimestamp         = 10
	typeUnion             = 14
)

// verifyMessage checks one message's metadata and returns its body length.
func verifyMessage(meta []byte) (int64, error) {
	v := &fb{b: meta, budget: len(meta)/4 + 1}
	root, err := v.u32(0)
	if err != nil {
		return 0, err
	}
	m, err := v.table(root)
	if err != nil {
		return 0, err
	}
	// version: short, header_type: ubyte, header, bodyLength: long.
	if err := v.scalars(m, 2, 1, 0, 8); err != nil {
		return 0, err
	}
	if err := v.tables(m, 4, v.keyValue); err != nil {
		return 0, err
	}
	var kind int
	if p, err := v.field(m, 1, 1); err != nil {
		return 0, err
	} else if p >= 0 {
		kind = int(meta[p])
	}
	var body int64
	if p, err := v.field(m, 3, 8); err != nil {
		return 0, err
	} else if p >= 0 {
		body = int64(binary.LittleEndian.Uint64(meta[p:]))
	}
	h, ok, err := v.child(m, 2)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: message has no header", errMeta)
	}
	switch kind {
	case headerSchema:
		err = v.schema(h)
	case headerRecordBatch:
		err = v.recordBatch(h)
	case headerDictionaryBatch:
		// id: long, data: RecordBatch, isDelta: bool.
		if err = v.scalars(h, 8, 0, 1); err == nil {
			var rb table
			if rb, ok, err = v.child(h, 1); err == nil && ok {
				err = v.recordBatch(rb)
			}
		}
	default:
		return 0, fmt.Errorf("%w: message type %d is not a schema, dictionary or record batch", errMeta, kind)
	}
	return body, err
}

func (v *fb) keyValue(t table) error {
	for slot := range 2 { // key, value: strings
		if _, _, err := v.vectorField(t, slot, 1); err != nil {
			return err
		}
	}
	return nil
}

func (v *fb) schema(t table) error {
	// endianness: short, fields, custom_metadata, features: [long].
	if err := v.scalars(t, 2); err != nil {
		return err
	}
	if err := v.tables(t, 1, func(f table) error { return v.field0(f, 1) }); err != nil {
		return err
	}
	if err := v.tables(t, 2, v.keyValue); err != nil {
		return err
	}
	_, _, err := v.vectorField(t, 3, 8)
	return err
}

// field0 checks a Field table at nesting depth.
func (v *fb) field0(t table, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: fields nest deeper than %d", errMeta, maxDepth)
	}
	// name: string, nullable: bool, type_type: ubyte, type, dictionary,
	// children, custom_metadata.
	if _, _, err := v.vectorField(t, 0, 1); err != nil {
		return err
	}
	if err := v.scalars(t, 0, 1, 1); err != nil {
		return err
	}
	var tag int
	if p, err := v.field(t, 2, 1); err != nil {
		return err
	} else if p >= 0 {
		tag = int(v.b[p])
	}
	if ty, ok, err := v.child(t, 3); err != nil {
		return err
	} else if ok {
		switch tag {
		case typeTimestamp: // unit: short, timezone: string
			if err := v.scalars(ty, 2); err != nil {
				return err
			}
			if _, _, err := v.vectorField(ty, 1, 1); err != nil {
				return err
			}
		case typeUnion: // mode: short, typeIds: [int]
			if err := v.scalars(ty, 2); err != nil {
				return err
			}
			if _, _, err := v.vectorField(ty, 1, 4); err != nil {
				return err
			}
		default:
			// Every other type table holds at most two scalars of up to
			// 4 bytes (bitWidth, precision, unit, listSize, ...).
			for slot := range 3 {
				if _, err := v.field(ty, slot, 1); err != nil {
					return err
				}
			}
		}
	}
	if d, ok, err := v.child(t, 4); err != nil {
		return err
	} else if ok {
		// id: long, indexType: Int, isOrdered: bool, dictionaryKind: short.
		if err := v.scalars(d, 8, 0, 1, 2); err != nil {
			return err
		}
		if it, ok, err := v.child(d, 1); err != nil {
			return err
		} else if ok {
			if err := v.scalars(it, 4, 1); err != nil { // bitWidth: int, is_signed: bool
				return err
			}
		}
	}
	if err := v.tables(t, 5, func(c table) error { return v.field0(c, depth+1) }); err != nil {
		return err
	}
	return v.tables(t, 6, v.keyValue)
}

func (v *fb) recordBatch(t table) error {
	// length: long, nodes: [FieldNode (16 bytes)], buffers: [Buffer (16
	// bytes)], compression, variadicBufferCounts: [long].
	if err := v.scalars(t, 8); err != nil {
		return err
	}
	for _, slot := range []int{1, 2} {
		if _, _, err := v.vectorField(t, slot, 16); err != nil {
			return err
		}
	}
	if c, ok, err := v.child(t, 3); err != nil {
		return err
	} else if ok {
		if err := v.scalars(c, 1, 1); err != nil { // codec, method: byte
			return err
		}
	}
	_, _, err := v.vectorField(t, 4, 8)
	return err
}
