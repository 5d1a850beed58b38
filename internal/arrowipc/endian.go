package arrowipc

import (
	"github.com/durashuffle/durashuffle/internal/arrowcheck"

	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/endian"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// SwapEndian returns a new ArrayData of d's values with every multi-byte
// value, at any depth (children, dictionary values, extension storage),
// in the other byte order; from is the order d is in. It covers every
// Arrow type:
//
//   - fixed-width values (integers, floats of 16 to 64 bits, dates,
//     times, timestamps, durations, month intervals, decimal32 and
//     decimal64) are reversed value by value; day-time intervals as two
//     int32, month-day-nano intervals as int32, int32, int64;
//     decimal128 and decimal256 as one 16- or 32-byte integer (their
//     64-bit words change order too);
//   - offsets of binaries, strings and lists (32 and 64 bit), offsets and
//     sizes of list views (32 and 64 bit), dense union offsets (32 bit);
//   - views of binary_view and string_view: each 16-byte view's int32
//     length, and, when the length (read in the order from) is over 12,
//     its int32 buffer index and int32 offset; inline bytes and the
//     4-byte prefix are bytes, kept;
//   - run-end encoded arrays through their children (run ends and
//     values), dictionaries through their indices and their dictionary.
//
// Validity bitmaps, booleans, 1-byte values, union type ids, the bytes of
// binaries and fixed-size binaries are kept: they are shared with d, not
// copied. Every swapped buffer is new memory from mem; d and its buffers
// are never written, so a buffer shared between batches (a dictionary
// arrow-go's IPC readers keep for every batch that uses it) or between
// columns stays as it is. A non-zero offset is kept: whole buffers are
// swapped, which leaves the offset meaning the same values. Nothing is
// validated: a swapped view or offset is not checked against its buffer.
// NativeMessages applies the same rules to IPC message bodies (write -i's
// input); SwapEndian is for arrays in memory (to write big-endian IPC, as
// the tests do). The caller releases the result.
func SwapEndian(d arrow.ArrayData, from endian.Endianness, mem memory.Allocator) (arrow.ArrayData, error) {
	if d == nil {
		return nil, nil
	}
	var src binary.ByteOrder = binary.LittleEndian
	if from == endian.BigEndian {
		src = binary.BigEndian
	}
	return swapData(d, src, mem, 0)
}

// maxSwapDepth bounds the nesting SwapEndian follows (arrow-go's IPC
// reader stops at 64 levels).
const maxSwapDepth = 1 << 10

func swapData(d arrow.ArrayData, src binary.ByteOrder, mem memory.Allocator, depth int) (out arrow.ArrayData, err error) {
	if depth > maxSwapDepth {
		return nil, fmt.Errorf("nested more than %d levels deep", maxSwapDepth)
	}
	dt := d.DataType()
	in := d.Buffers()
	bufs := make([]*memory.Buffer, len(in))
	owned := make([]bool, len(in))
	defer func() {
		for i, b := range bufs {
			if owned[i] && b != nil {
				b.Release()
			}
		}
	}()
	copy(bufs, in)
	// swap replaces buffer i (if present) with a copy in which fn has
	// reversed the byte order.
	swap := func(i int, fn func(dst, src []byte)) error {
		if i >= len(in) {
			return fmt.Errorf("%s has %d buffers, want at least %d", dt, len(in), i+1)
		}
		if in[i] == nil || in[i].Len() == 0 {
			return nil
		}
		b := memory.NewResizableBuffer(mem)
		b.Resize(in[i].Len())
		fn(b.Bytes(), in[i].Bytes())
		bufs[i], owned[i] = b, true
		return nil
	}
	width := func(i, w int) error { return swap(i, func(dst, s []byte) { reverseEach(dst, s, w) }) }

	switch id := arrowcheck.StorageID(dt); id {
	case arrow.NULL, arrow.BOOL, arrow.INT8, arrow.UINT8, arrow.FIXED_SIZE_BINARY,
		arrow.FIXED_SIZE_LIST, arrow.STRUCT, arrow.RUN_END_ENCODED, arrow.SPARSE_UNION:
		// Bytes, bits or nothing of their own: only children, if any.
	case arrow.INT16, arrow.UINT16, arrow.FLOAT16:
		err = width(1, 2)
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32, arrow.DATE32, arrow.TIME32,
		arrow.INTERVAL_MONTHS, arrow.DECIMAL32:
		err = width(1, 4)
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.DATE64, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION, arrow.DECIMAL64:
		err = width(1, 8)
	case arrow.INTERVAL_DAY_TIME: // days int32, milliseconds int32
		err = width(1, 4)
	case arrow.INTERVAL_MONTH_DAY_NANO: // months int32, days int32, nanoseconds int64
		err = swap(1, swapMonthDayNano)
	case arrow.DECIMAL128:
		err = width(1, 16)
	case arrow.DECIMAL256:
		err = width(1, 32)
	case arrow.STRING, arrow.BINARY, arrow.LIST, arrow.MAP:
		err = width(1, 4)
	case arrow.LARGE_STRING, arrow.LARGE_BINARY, arrow.LARGE_LIST:
		err = width(1, 8)
	case arrow.LIST_VIEW:
		if err = width(1, 4); err == nil {
			err = width(2, 4)
		}
	case arrow.LARGE_LIST_VIEW:
		if err = width(1, 8); err == nil {
			err = width(2, 8)
		}
	case arrow.DENSE_UNION:
		err = width(2, 4)
	case arrow.STRING_VIEW, arrow.BINARY_VIEW:
		err = swap(1, func(dst, s []byte) { swapViews(dst, s, src) })
	case arrow.DICTIONARY:
		idx := storageType(dt).(*arrow.DictionaryType).IndexType
		if w := idx.(arrow.FixedWidthDataType).BitWidth() / 8; w > 1 {
			err = width(1, w)
		}
	default:
		err = fmt.Errorf("%w: swapping the byte order of %s", arrow.ErrNotImplemented, dt)
	}
	if err != nil {
		return nil, err
	}

	children := make([]arrow.ArrayData, 0, len(d.Children()))
	defer func() {
		for _, c := range children {
			c.Release()
		}
	}()
	for i, c := range d.Children() {
		sc, err := swapData(c, src, mem, depth+1)
		if err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		children = append(children, sc)
	}
	nulls := d.NullN()
	if dict := dictionaryOf(d); dict != nil {
		sd, err := swapData(dict, src, mem, depth+1)
		if err != nil {
			return nil, fmt.Errorf("dictionary: %w", err)
		}
		defer sd.Release()
		return array.NewDataWithDictionary(dt, d.Len(), bufs, nulls, d.Offset(), sd.(*array.Data)), nil
	}
	return array.NewData(dt, d.Len(), bufs, children, nulls, d.Offset()), nil
}

// reverse writes s to dst with its bytes in reverse order.
func reverse(dst, s []byte) {
	for i, n := 0, len(s); i < n; i++ {
		dst[i] = s[n-1-i]
	}
}

// reverseEach writes s to dst with each w-byte value's bytes reversed; a
// trailing piece shorter than w (a buffer of an odd length) is copied.
func reverseEach(dst, s []byte, w int) {
	n := len(s) / w * w
	switch w {
	case 2:
		for i := 0; i < n; i += 2 {
			binary.LittleEndian.PutUint16(dst[i:], binary.BigEndian.Uint16(s[i:]))
		}
	case 4:
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(dst[i:], binary.BigEndian.Uint32(s[i:]))
		}
	case 8:
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], binary.BigEndian.Uint64(s[i:]))
		}
	default:
		for i := 0; i < n; i += w {
			reverse(dst[i:i+w], s[i:i+w])
		}
	}
	copy(dst[n:], s[n:])
}

// swapViews swaps 16-byte views: the int32 length, read in the order
// src, and for a length over 12 (not inline) the int32 buffer index and
// offset; the inline bytes or the 4-byte prefix are kept.
func swapViews(dst, s []byte, src binary.ByteOrder) {
	copy(dst, s)
	const size, inline = 16, 12 // a view's bytes; the most held inline
	n := len(s) / size * size
	for i := 0; i < n; i += size {
		v := s[i : i+size]
		reverse(dst[i:i+4], v[0:4])
		if int32(src.Uint32(v[0:4])) > inline {
			reverse(dst[i+8:i+12], v[8:12])
			reverse(dst[i+12:i+16], v[12:16])
		}
	}
}

// storageType is dt, or an extension type's storage (at any depth).
func storageType(dt arrow.DataType) arrow.DataType {
	if ext, ok := dt.(arrow.ExtensionType); ok {
		return storageType(ext.StorageType())
	}
	return dt
}

// dictionaryOf is d's dictionary, or nil (not an interface holding a nil
// *array.Data, which Dictionary returns for an array without one).
func dictionaryOf(d arrow.ArrayData) arrow.ArrayData {
	dict := d.Dictionary()
	if dd, ok := dict.(*array.Data); ok && dd == nil {
		return nil
	}
	return dict
}
