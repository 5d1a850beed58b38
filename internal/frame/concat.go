package frame

import (
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Concat merges recs (all of schema) into one record batch with compact
// buffers.
//
// A frame of small input batches is concatenated from dozens of slices
// per column, so this is on the write path's hot loop: each output
// buffer is sized exactly in one pass and filled by copying from the
// pieces, with no intermediate buffer per piece (arrow's
// array.Concatenate wraps every piece's every buffer first, a cost paid
// per piece that dominates when pieces are small). Primitive, boolean,
// string, binary, list, map, fixed-size list and struct columns take this path;
// other layouts (dictionary, views, unions, run-end encoded, extension)
// fall back to array.Concatenate, also when nested.
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
	for j, r := range recs {
		// Once per batch, not per column: a frame of small batches has
		// dozens, mostly with the writer's own schema.
		if r.Schema() != schema && !r.Schema().Equal(schema) {
			return nil, fmt.Errorf("concatenate batch %d: schema %s, want %s", j, r.Schema(), schema)
		}
		rows += r.NumRows()
	}
	ps := make([]piece, len(recs))
	for i := range cols {
		typ := schema.Field(i).Type
		for j, r := range recs {
			d := r.Column(i).Data()
			ps[j] = piece{d: d, off: d.Offset(), n: d.Len()}
		}
		d, err := concatPieces(typ, ps, mem)
		if err != nil {
			return nil, fmt.Errorf("concatenate column %q: %w", schema.Field(i).Name, err)
		}
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}

// piece is the rows [off, off+n) of d's buffers; off already includes
// d.Offset(). A child's rows are pieces of the child's data, found from
// the parent's offsets, without slicing the data itself.
type piece struct {
	d      arrow.ArrayData
	off, n int
}

// nulls counts the piece's nulls, from the data's count when the piece
// is all of it or the data has none.
func (p piece) nulls() int {
	if p.n == 0 {
		return 0
	}
	whole := p.off == p.d.Offset() && p.n == p.d.Len()
	if nn := p.d.NullN(); nn == 0 || (whole && nn > 0) {
		return nn
	}
	bm := p.d.Buffers()[0]
	if bm == nil {
		return 0
	}
	return p.n - bitutil.CountSetBits(bm.Bytes(), p.off, p.n)
}

// concatPieces returns a new ArrayData of type dt holding every piece's
// rows in order, with offset 0.
func concatPieces(dt arrow.DataType, ps []piece, mem memory.Allocator) (_ arrow.ArrayData, err error) {
	var n, nulls int
	for _, p := range ps {
		n += p.n
	}
	id := dt.ID()
	switch id {
	case arrow.NULL:
		return array.NewData(dt, n, []*memory.Buffer{nil}, nil, n, 0), nil
	case arrow.BOOL, arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY,
		arrow.LIST, arrow.LARGE_LIST, arrow.MAP, arrow.FIXED_SIZE_LIST, arrow.STRUCT:
	default:
		fw, ok := dt.(arrow.FixedWidthDataType)
		if !ok || id == arrow.DICTIONARY || id == arrow.EXTENSION || fw.BitWidth()%8 != 0 {
			return concatFallback(ps, mem)
		}
	}

	var bufs []*memory.Buffer
	defer func() {
		if err != nil {
			for _, b := range bufs {
				if b != nil {
					b.Release()
				}
			}
		}
	}()
	for _, p := range ps {
		nulls += p.nulls()
	}
	var validity *memory.Buffer
	if nulls > 0 {
		validity = concatBits(ps, 0, n, mem)
	}
	bufs = append(bufs, validity)

	var children []arrow.ArrayData
	defer func() {
		if err != nil {
			for _, c := range children {
				c.Release()
			}
		}
	}()
	switch id {
	case arrow.BOOL:
		bufs = append(bufs, concatBits(ps, 1, n, mem))
	case arrow.STRING, arrow.BINARY:
		offs, data, err := concatBinary[int32](ps, n, mem)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, offs, data)
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		offs, data, err := concatBinary[int64](ps, n, mem)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, offs, data)
	case arrow.LIST, arrow.MAP:
		offs, c, err := concatList[int32](ps, n, mem)
		if offs != nil {
			bufs = append(bufs, offs)
		}
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	case arrow.LARGE_LIST:
		offs, c, err := concatList[int64](ps, n, mem)
		if offs != nil {
			bufs = append(bufs, offs)
		}
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	case arrow.FIXED_SIZE_LIST:
		size := int(dt.(*arrow.FixedSizeListType).Len())
		cps := make([]piece, len(ps))
		for i, p := range ps {
			c := p.d.Children()[0]
			cps[i] = piece{d: c, off: c.Offset() + p.off*size, n: p.n * size}
		}
		c, err := concatPieces(ps[0].d.Children()[0].DataType(), cps, mem)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		children = append(children, c)
	case arrow.STRUCT:
		// A struct's offset applies to its children, which are not sliced.
		cps := make([]piece, len(ps))
		for f := range dt.(*arrow.StructType).NumFields() {
			for i, p := range ps {
				c := p.d.Children()[f]
				cps[i] = piece{d: c, off: c.Offset() + p.off, n: p.n}
			}
			c, err := concatPieces(ps[0].d.Children()[f].DataType(), cps, mem)
			if err != nil {
				return nil, fmt.Errorf("field %d: %w", f, err)
			}
			children = append(children, c)
		}
	default:
		width := dt.(arrow.FixedWidthDataType).BitWidth() / 8
		out := allocate(n*width, mem)
		dst := out.Bytes()
		for _, p := range ps {
			if p.n > 0 {
				dst = dst[copy(dst, p.d.Buffers()[1].Bytes()[p.off*width:(p.off+p.n)*width]):]
			}
		}
		bufs = append(bufs, out)
	}
	d := array.NewData(dt, n, bufs, children, nulls, 0)
	for _, b := range bufs {
		if b != nil {
			b.Release()
		}
	}
	for _, c := range children {
		c.Release()
	}
	return d, nil
}

// allocate returns a buffer of exactly n bytes from mem, not cleared:
// the caller writes every byte.
func allocate(n int, mem memory.Allocator) *memory.Buffer {
	b := memory.NewResizableBuffer(mem)
	b.Resize(n)
	return b
}

// concatBits concatenates the bitmaps in buffer idx of the pieces
// (validity or boolean values); a piece without a validity bitmap is all
// valid. The bits past n are zero.
func concatBits(ps []piece, idx, n int, mem memory.Allocator) *memory.Buffer {
	out := allocate(int(bitutil.BytesForBits(int64(n))), mem)
	dst := out.Bytes()
	clear(dst)
	pos := 0
	for _, p := range ps {
		if p.n == 0 {
			continue
		}
		if b := p.d.Buffers()[idx]; b != nil && (idx != 0 || p.d.NullN() != 0) {
			bitutil.CopyBitmap(b.Bytes(), p.off, p.n, dst, pos)
		} else {
			bitutil.SetBitsTo(dst, int64(pos), int64(p.n), true)
		}
		pos += p.n
	}
	return out
}

// concatBinary concatenates string or binary pieces: offsets rebased to
// start at 0, and the values they cover.
func concatBinary[T int32 | int64](ps []piece, n int, mem memory.Allocator) (offs, data *memory.Buffer, err error) {
	offs, vps, err := concatOffsets[T](ps, n, false, mem)
	if err != nil {
		return nil, nil, err
	}
	var size int
	for _, v := range vps {
		size += v.n
	}
	data = allocate(size, mem)
	dst := data.Bytes()
	for i, v := range vps {
		if v.n > 0 {
			dst = dst[copy(dst, ps[i].d.Buffers()[2].Bytes()[v.off:v.off+v.n]):]
		}
	}
	return offs, data, nil
}

// concatList concatenates the offsets of list pieces (T: their width) and
// the values they point to. A non-nil offsets buffer is the caller's to
// release, also with an error.
func concatList[T int32 | int64](ps []piece, n int, mem memory.Allocator) (*memory.Buffer, arrow.ArrayData, error) {
	offs, cps, err := concatOffsets[T](ps, n, true, mem)
	if err != nil {
		return nil, nil, err
	}
	c, err := concatPieces(ps[0].d.Children()[0].DataType(), cps, mem)
	if err != nil {
		return offs, nil, fmt.Errorf("values: %w", err)
	}
	return offs, c, nil
}

// concatOffsets writes the n+1 offsets of the pieces, rebased to run on
// from 0, and returns the range each piece's offsets cover: of the
// values buffer (binary), or of the child's rows (lists).
func concatOffsets[T int32 | int64](ps []piece, n int, child bool, mem memory.Allocator) (*memory.Buffer, []piece, error) {
	width, limit := arrow.Int32SizeBytes, int64(math.MaxInt32)
	if _, large := any(T(0)).(int64); large {
		width, limit = arrow.Int64SizeBytes, math.MaxInt64
	}
	out := allocate((n+1)*width, mem)
	dst := arrow.GetData[T](out.Bytes())
	vps := make([]piece, len(ps))
	var end int64
	pos := 0
	for i, p := range ps {
		if child {
			vps[i].d = p.d.Children()[0]
		}
		if p.n == 0 {
			continue // an empty array may have no offsets at all
		}
		src := arrow.GetData[T](p.d.Buffers()[1].Bytes())[p.off : p.off+p.n+1]
		first, last := int64(src[0]), int64(src[p.n])
		if end+last-first > limit {
			out.Release()
			return nil, nil, fmt.Errorf("%d values overflow %d-bit offsets", end+last-first, 8*width)
		}
		delta := T(end - first)
		o := dst[pos : pos+p.n]
		for k, v := range src[:p.n] {
			o[k] = v + delta
		}
		pos += p.n
		vps[i].off, vps[i].n = int(first), int(last-first)
		if child {
			vps[i].off += vps[i].d.Offset()
		}
		end += last - first
	}
	dst[n] = T(end)
	return out, vps, nil
}

// concatFallback concatenates pieces of a layout Concat does not copy
// itself with array.Concatenate, which leaves some bytes it allocates
// unwritten (bitmap tails, unused view bytes): its memory is cleared, so
// that a reused buffer's old contents never reach a frame.
func concatFallback(ps []piece, mem memory.Allocator) (arrow.ArrayData, error) {
	mem = clearing{mem}
	arrs := make([]arrow.Array, len(ps))
	defer func() {
		for _, a := range arrs {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, p := range ps {
		lo := int64(p.off - p.d.Offset())
		s := array.NewSliceData(p.d, lo, lo+int64(p.n))
		arrs[i] = array.MakeFromData(s)
		s.Release()
	}
	a, err := array.Concatenate(arrs, mem)
	if err != nil {
		return nil, err
	}
	defer a.Release()
	d := a.Data()
	d.Retain()
	return d, nil
}

// clearing is an allocator whose allocations are zeroed.
type clearing struct{ memory.Allocator }

func (c clearing) Allocate(size int) []byte {
	b := c.Allocator.Allocate(size)
	clear(b)
	return b
}

func (c clearing) Reallocate(size int, b []byte) []byte {
	n := len(b)
	b = c.Allocator.Reallocate(size, b)
	if size > n {
		clear(b[n:])
	}
	return b
}
