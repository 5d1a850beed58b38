package chunker

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/durashuffle/durashuffle/internal/arrowcheck"
)

// validateBatch checks rec the way Write does before any of it is taken:
// at least one column; every column as long as the batch and of its
// field's type; and Arrow's full validation of every column
// (array.ValidateFull: buffer sizes, null counts, every offset of
// strings, binaries and lists non-negative, non-decreasing and within
// the values, UTF-8 of strings, dictionary indices, nested children).
// The error wraps ErrBatch and names the column, its type and what is
// wrong. Batches from the network are untrusted: a corrupt offset that
// reached the chunker would panic while it copies rows or, worse, be
// stored and fail every later read of the partition.
//
// It makes those checks reading every offset and string byte once and
// allocating nothing, unlike array.ValidateFull itself, which allocates
// at every column and checks UTF-8 string by string
// (BenchmarkValidateBatch measures the cost). It only reads rec, keeps
// no reference to it and is safe for concurrent use.
func validateBatch(rec arrow.RecordBatch) (err error) {
	if rec == nil {
		return fmt.Errorf("%w: the batch is nil", ErrBatch)
	}
	sc := rec.Schema()
	if rec.NumCols() == 0 || sc == nil || sc.NumFields() == 0 {
		return fmt.Errorf("%w: the schema %s has no columns (%d rows); a batch needs at least one column", ErrBatch, schemaString(sc), rec.NumRows())
	}
	if int64(sc.NumFields()) != rec.NumCols() {
		return fmt.Errorf("%w: %d columns, the schema %s has %d fields", ErrBatch, rec.NumCols(), schemaString(sc), sc.NumFields())
	}
	if rec.NumRows() < 0 {
		return fmt.Errorf("%w: the batch has %d rows", ErrBatch, rec.NumRows())
	}
	col := -1
	defer func() {
		// ValidateFull is meant for untrusted data, but a check that
		// panics on some input must still refuse the batch, not end the
		// process.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: validation failed: %v", ErrBatch, columnName(sc, col), r)
		}
	}()
	for i := range sc.NumFields() {
		col = i
		f := sc.Field(i) // not Fields(): it copies them all
		c := rec.Column(i)
		switch {
		case c == nil:
			return fmt.Errorf("%w: %s: no array", ErrBatch, columnName(sc, i))
		case !arrow.TypeEqual(c.DataType(), f.Type):
			return fmt.Errorf("%w: %s: the array is of type %s", ErrBatch, columnName(sc, i), c.DataType())
		case int64(c.Len()) != rec.NumRows():
			return fmt.Errorf("%w: %s: %d values, the batch has %d rows", ErrBatch, columnName(sc, i), c.Len(), rec.NumRows())
		}
		if arrowcheck.NeedsNormalize(f.Type) {
			if err := validateSpecial(c); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBatch, columnName(sc, i), err)
			}
			continue
		}
		if err := validateColumn(c); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBatch, columnName(sc, i), err)
		}
	}
	return nil
}

// validateSpecial validates a column that holds, at some depth, a null,
// run-end encoded or union array: its unions with arrowcheck.Unions (what
// Arrow's specification asks of type ids and dense offsets), then the
// whole column, with the absent buffers arrow-go's builders and IPC
// reader leave out of null and run-end encoded arrays added
// (arrowcheck.Normalize), with array.ValidateFull.
func validateSpecial(c arrow.Array) error {
	if err := arrowcheck.Unions(c.Data()); err != nil {
		return err
	}
	d, changed := arrowcheck.Normalize(c.Data())
	if !changed {
		return validateColumn(c)
	}
	defer d.Release()
	a := array.MakeFromData(d)
	defer a.Release()
	return validateColumn(a)
}

// validateColumn is array.ValidateFull(c), done here without allocating
// for the flat types most batches are made of (fixed-width numbers and
// times, booleans, strings and binaries), with the same checks: for a
// batch of a few rows Arrow's own costs more than the write itself
// (DataType.Layout allocates at every call), and its UTF-8 check goes
// string by string. Strings are checked in one pass over their bytes
// (utf8.Valid of the whole values range, and no offset inside a
// character: together the same as every string valid on its own). It is
// stricter in one place: a non-empty boolean array must have its values
// bitmap. Every other type goes to array.ValidateFull.
func validateColumn(c arrow.Array) error {
	d, ok := c.Data().(*array.Data)
	if !ok || d == nil {
		return array.ValidateFull(c)
	}
	var width int // bytes per value of a fixed-width type
	switch dt := d.DataType(); dt.ID() {
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16, arrow.INT32, arrow.UINT32, arrow.INT64, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64, arrow.DATE32, arrow.DATE64, arrow.TIME32, arrow.TIME64,
		arrow.TIMESTAMP, arrow.DURATION:
		width = dt.(arrow.FixedWidthDataType).BitWidth() / 8
	case arrow.BOOL, arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
	default:
		return array.ValidateFull(c)
	}
	off, n := d.Offset(), d.Len()
	if off < 0 || n < 0 || off > int(^uint(0)>>1)-n {
		return fmt.Errorf("arrow/array: array offset %d and length %d are negative or overflow", off, n)
	}
	end := off + n
	if nulls := d.NullN(); nulls < array.UnknownNullCount || nulls > n {
		return fmt.Errorf("arrow/array: invalid null count %d for length %d", nulls, n)
	}
	if dict, _ := d.Dictionary().(*array.Data); len(d.Children()) != 0 || dict != nil {
		return fmt.Errorf("arrow/array: %s must not have child arrays or a dictionary", d.DataType())
	}
	bufs := d.Buffers()
	want := 2
	if id := d.DataType().ID(); id == arrow.STRING || id == arrow.BINARY || id == arrow.LARGE_STRING || id == arrow.LARGE_BINARY {
		want = 3
	}
	if len(bufs) != want {
		return fmt.Errorf("arrow/array: expected %d buffers for %s, got %d", want, d.DataType(), len(bufs))
	}
	// Validity: long enough, and the null count it states is the one it has.
	if v := bufs[0]; v != nil {
		if bitutil.BytesForBits(int64(end)) > int64(v.Len()) {
			return fmt.Errorf("arrow/array: bitmap buffer 0 is too small for offset %d and length %d", off, n)
		}
		if nulls := d.NullN(); nulls != array.UnknownNullCount {
			if actual := n - countSet(v.Bytes(), off, n); actual != nulls {
				return fmt.Errorf("arrow/array: null count value (%d) does not match actual number of nulls in array (%d)", nulls, actual)
			}
		}
	} else if nulls := d.NullN(); nulls != array.UnknownNullCount && nulls != 0 {
		return fmt.Errorf("arrow/array: null count value (%d) does not match actual number of nulls in array (0)", nulls)
	}
	switch d.DataType().ID() {
	case arrow.BOOL:
		if n > 0 && (bufs[1] == nil || bitutil.BytesForBits(int64(end)) > int64(bufs[1].Len())) {
			return fmt.Errorf("arrow/array: bitmap buffer 1 is missing or too small for offset %d and length %d", off, n)
		}
		return nil
	case arrow.STRING:
		return validateOffsets[int32](bufs, off, n, "string", true)
	case arrow.BINARY:
		return validateOffsets[int32](bufs, off, n, "binary", false)
	case arrow.LARGE_STRING:
		return validateOffsets[int64](bufs, off, n, "large string", true)
	case arrow.LARGE_BINARY:
		return validateOffsets[int64](bufs, off, n, "large binary", false)
	}
	if b := bufs[1]; b == nil && n > 0 || b != nil && end > b.Len()/width {
		return fmt.Errorf("arrow/array: buffer 1 is missing or too small for offset %d and length %d of %d-byte values", off, n, width)
	}
	return nil
}

// validateOffsets checks the offsets (buffer 1) and values (buffer 2) of a
// string or binary array of n values from off: every offset within the
// values and none smaller than the one before, and with utf8 every value
// valid UTF-8.
func validateOffsets[T int32 | int64](bufs []*memory.Buffer, off, n int, kind string, utf8Values bool) error {
	if n == 0 {
		return nil
	}
	if bufs[1] == nil {
		return fmt.Errorf("arrow/array: non-empty %s array has no offsets buffer", kind)
	}
	var offs []T
	switch any(T(0)).(type) {
	case int32:
		offs = any(arrow.Int32Traits.CastFromBytes(bufs[1].Bytes())).([]T)
	default:
		offs = any(arrow.Int64Traits.CastFromBytes(bufs[1].Bytes())).([]T)
	}
	if len(offs)-off < n+1 {
		return fmt.Errorf("arrow/array: %s offset buffer must have at least %d values, got %d", kind, off+n+1, len(offs))
	}
	offs = offs[off : off+n+1]
	var vals []byte
	if bufs[2] != nil {
		vals = bufs[2].Bytes()
	}
	first, last := offs[0], offs[n]
	switch {
	case first < 0:
		return fmt.Errorf("arrow/array: %s offset at index %d is negative: %d", kind, off, first)
	case int64(last) > int64(len(vals)):
		return fmt.Errorf("arrow/array: %s offset %d at index %d is out of bounds of the data buffer (length %d)", kind, last, off+n, len(vals))
	}
	// Values all ASCII, as most are, are valid UTF-8 however they are
	// split: one pass over their bytes checks them all. (Offsets that
	// end before they start are refused below.)
	check := utf8Values && (first > last || !ascii(vals[first:last]))
	prev := first
	for i, o := range offs[1:] {
		if o < prev {
			return fmt.Errorf("arrow/array: %s offsets are not monotonically non-decreasing at index %d: %d < %d", kind, off+i+1, o, prev)
		}
		// A value that ends inside a character: checked below as one
		// range, such a split would pass.
		if check && o < last && vals[o]&0xC0 == 0x80 {
			return fmt.Errorf("arrow/array: %s at index %d is not valid utf8: it starts inside a character", kind, off+i+1)
		}
		prev = o
	}
	if check && !utf8.Valid(vals[first:last]) {
		for i := range n {
			if !utf8.Valid(vals[offs[i]:offs[i+1]]) {
				return fmt.Errorf("arrow/array: %s at index %d is not valid utf8", kind, off+i)
			}
		}
	}
	return nil
}

// ascii reports whether every byte of b is under 0x80, 32 bytes a step.
func ascii(b []byte) bool {
	for len(b) >= 32 {
		c := b[:32]
		w := binary.LittleEndian.Uint64(c[0:]) | binary.LittleEndian.Uint64(c[8:]) | binary.LittleEndian.Uint64(c[16:]) | binary.LittleEndian.Uint64(c[24:])
		if w&0x8080808080808080 != 0 {
			return false
		}
		b = b[32:]
	}
	var w byte
	for _, c := range b {
		w |= c
	}
	return w < 0x80
}

// countSet is the number of bits set in bits [off, off+n) of bitmap b
// (least significant bit first, as Arrow's): bitutil.CountSetBits, which
// goes bit by bit up to the first 64-bit boundary past off, a cost that
// dominates for a slice of a few hundred rows.
func countSet(b []byte, off, n int) int {
	if n <= 0 {
		return 0
	}
	end := off + n
	first, last := off/8, (end-1)/8
	head := byte(0xFF) << (off % 8)
	tail := byte(0xFF) >> (7 - (end-1)%8)
	if first == last {
		return bits.OnesCount8(b[first] & head & tail)
	}
	c := bits.OnesCount8(b[first] & head)
	i := first + 1
	for ; i+8 <= last; i += 8 {
		c += bits.OnesCount64(binary.LittleEndian.Uint64(b[i:]))
	}
	for ; i < last; i++ {
		c += bits.OnesCount8(b[i])
	}
	return c + bits.OnesCount8(b[last]&tail)
}

// columnName names column i of sc for an error: its index, name and type.
func columnName(sc *arrow.Schema, i int) string {
	if i < 0 || i >= sc.NumFields() {
		return fmt.Sprintf("column %d", i)
	}
	f := sc.Field(i)
	return fmt.Sprintf("column %d %q (%s)", i, f.Name, f.Type)
}

// schemaString renders a schema on one line.
func schemaString(sc *arrow.Schema) string {
	if sc == nil {
		return "<nil>"
	}
	s := "{"
	for i, f := range sc.Fields() {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s: %s", f.Name, f.Type)
	}
	return s + "}"
}
